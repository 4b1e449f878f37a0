"""How long `tpucourse watch` takes to answer a save: a correct ch11 matmul written over the stub.

    python bench/watch_latency.py                    # 5 saves per mode, both modes
    python bench/watch_latency.py --saves 7 --modes fork

A copy of the course (course.toml, exercises/, solutions/) goes to a temporary directory
with an empty compilation cache. In each mode a watcher is started on ch11.matmul; its first
run meets the stub (TODO). Then the shipped solution is saved over the stub, again and again
(each save changes a trailing comment). For each save it records when the watcher printed
its `changed:` line, and when it printed its verdict (`watch: ch11.matmul is done`).

Modes: `fork`, each run forked from the watcher's warm process (the default); `spawn`, each
run a fresh `python -m pytest` process (TPUCOURSE_WATCH_RUNS=spawn, how the watch ran before
it kept a warm process). The first save of a mode compiles into an empty cache: the cold
answer; the median of the later ones is the warm answer. This measures the grader on this
machine, not any kernel's speed on a TPU. Prints Markdown ready for docs/speed.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPIED = ("course.toml", "pyproject.toml", "conftest.py", "exercises", "solutions")
SOLUTION = "solutions/ch11/matmul.py"
STUB = "exercises/ch11/matmul.py"


class Watcher:
    """A `tpucourse watch` child whose output lines are kept with the time each arrived."""

    def __init__(self, root: Path, mode: str):
        env = {**os.environ, "TPUCOURSE_WATCH_RUNS": mode}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest_tpucourse.commands.main", "watch", "ch11.matmul"], cwd=root, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))

    def wait_for(self, text: str, after: int, timeout: float = 600) -> tuple[float, int]:
        """When the first line containing `text` from line `after` on arrived, and its index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for index in range(after, len(self.lines)):
                if text in self.lines[index][1]:
                    return self.lines[index][0], index + 1
            if self.process.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError(f"no {text!r} from the watcher:\n" + "\n".join(line for _, line in self.lines))

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


def measure(mode: str, saves: int) -> list[tuple[float, float]]:
    """(seconds to the `changed:` line, seconds to the verdict) per save."""
    with tempfile.TemporaryDirectory(prefix="watch-latency-") as directory:
        root = Path(directory)
        for name in COPIED:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.exists():
                shutil.copy(source, root / name)
        solution = (REPO / SOLUTION).read_text(encoding="utf-8")
        watcher = Watcher(root, mode)
        try:
            _, seen = watcher.wait_for("watch: waiting for changes", 0)
            answers = []
            for save in range(saves):
                start = time.perf_counter()
                (root / STUB).write_text(solution + f"\n# save {save}\n", encoding="utf-8")
                noticed, seen = watcher.wait_for("changed: exercises/ch11/matmul.py", seen)
                verdict, seen = watcher.wait_for("watch: ch11.matmul is", seen)
                if "is done" not in watcher.lines[seen - 1][1]:
                    raise RuntimeError("the solution did not pass:\n" + "\n".join(l for _, l in watcher.lines))
                answers.append((noticed - start, verdict - start))
                _, seen = watcher.wait_for("watch: waiting for changes", seen)
            return answers
        finally:
            watcher.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--modes", nargs="+", default=["fork", "spawn"], choices=["fork", "spawn"])
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"`python bench/watch_latency.py --saves {args.saves} --modes {' '.join(args.modes)}`: "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| runs | `changed:` line | cold answer (first save, empty cache) | warm answer (median of the "
          "later saves) | every save |")
    print("|---|---|---|---|---|")
    for mode in args.modes:
        answers = measure(mode, args.saves)
        noticed = max(n for n, _ in answers)
        later = [v for _, v in answers[1:]] or [answers[0][1]]
        every = ", ".join(f"{v:.1f}" for _, v in answers)
        label = "forked from the warm watcher" if mode == "fork" else "`python -m pytest` per run"
        print(f"| {label} | <= {noticed:.2f} s | {answers[0][1]:.1f} s | {statistics.median(later):.1f} s "
              f"| {every} s |")


if __name__ == "__main__":
    main()
