"""How long `tpucourse watch` takes to answer a save of ch11's matmul, as ratios to a bare
collection of the same test file on the same machine, paired save by save.

    python bench/watch_latency.py                         # 7 saves, forked runs, mistake and fix in turn
    python bench/watch_latency.py --saves 9 --modes fork spawn --scenario same

A copy of the course (course.toml, exercises/, solutions/) goes to a temporary directory
with an empty compilation cache, and a watcher is started on ch11.matmul (its first run
meets the stub: TODO). Then a learner's kernel is saved over the stub again and again: the
shipped solution with its names changed as a learner who wrote it would name them (the
course refuses the shipped code itself), each save with a different trailing comment.
Scenario `fix` (the default) saves, in turn, that kernel with its k axis marked "parallel" (a
mistake the race check names) and the kernel fixed, as a learner's loop goes; `same` saves
the correct kernel every time.

For each save it records when the watcher printed its `changed:` line, its first answer
(`watch: first answer, ...`: the test the save most likely broke, run first) and its verdict
on the whole file (`watch: ch11.matmul is ...`). Right after each save's run, with the
watcher idle, it times a bare collection of the same file in the same copy
(`python -m pytest --collect-only -q exercises/ch11/test_matmul.py`, the cost of starting
pytest, JAX and the plugin and importing the test file), and divides: the ratios are
paired run by run, so load that comes and goes moves both. The first save compiles into an
empty cache (cold); the medians are over the later saves (warm). The load average is read
at each save. This measures the grader on this machine, not any kernel's speed on a TPU.
Prints Markdown ready for docs/speed.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPIED = ("course.toml", "pyproject.toml", "conftest.py", "exercises", "solutions")
SOLUTION = "solutions/ch11/matmul.py"
STUB = "exercises/ch11/matmul.py"
TEST_FILE = "exercises/ch11/test_matmul.py"
COLLECT = [sys.executable, "-m", "pytest", "--collect-only", "-q", TEST_FILE]

# The shipped solution as a learner who wrote it would name things (any names would do).
LEARNER_NAMES = {"matmul_kernel": "_tile_product", "acc_ref": "total", "x_ref": "a_blk", "y_ref": "b_blk",
                 "o_ref": "out_blk", "_init": "_zero", "_flush": "_write", "k2": "k_of_y", "dim": "axis_name",
                 "size": "extent", "block": "blk"}
ARBITRARY = 'dimension_semantics=("parallel", "parallel", "arbitrary")'
PARALLEL_K = 'dimension_semantics=("parallel", "parallel", "parallel")'


def learners_kernel() -> str:
    source = (REPO / SOLUTION).read_text(encoding="utf-8")
    for name, renamed in LEARNER_NAMES.items():
        source = re.sub(rf"\b{name}\b", renamed, source)
    assert source.count(ARBITRARY) == 1
    return source


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


@dataclass
class Save:
    kind: str  # "mistake" or "fix" (or "correct")
    noticed: float  # seconds from the save to the `changed:` line
    first: float  # ... to the first answer
    whole: float  # ... to the verdict on the whole file
    collection: float  # the paired bare collection's wall time
    load: float  # the 1-minute load average at the save
    first_line: str

    @property
    def first_ratio(self) -> float:
        return self.first / self.collection

    @property
    def whole_ratio(self) -> float:
        return self.whole / self.collection


def measure(mode: str, saves: int, scenario: str) -> list[Save]:
    with tempfile.TemporaryDirectory(prefix="watch-latency-") as directory:
        root = Path(directory)
        for name in COPIED:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.exists():
                shutil.copy(source, root / name)
        correct = learners_kernel()
        wrong = correct.replace(ARBITRARY, PARALLEL_K)
        watcher = Watcher(root, mode)
        try:
            _, seen = watcher.wait_for("watch: waiting for changes", 0)
            measured = []
            for save in range(saves):
                kind = ("mistake" if save % 2 == 0 else "fix") if scenario == "fix" else "correct"
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
                start = time.perf_counter()
                (root / STUB).write_text((wrong if kind == "mistake" else correct) + f"\n# save {save}\n",
                                         encoding="utf-8")
                noticed, seen = watcher.wait_for("changed: exercises/ch11/matmul.py", seen)
                first, seen = watcher.wait_for("watch: first answer", seen)
                first_line = watcher.lines[seen - 1][1]
                verdict, seen = watcher.wait_for("watch: ch11.matmul is", seen)
                said = watcher.lines[seen - 1][1]
                if ("is done" in said) != (kind != "mistake"):
                    raise RuntimeError(f"a {kind} save was answered {said!r}:\n"
                                       + "\n".join(line for _, line in watcher.lines))
                _, seen = watcher.wait_for("watch: waiting for changes", seen)
                collection = _collect(root)
                measured.append(Save(kind, noticed - start, first - start, verdict - start, collection, load,
                                     first_line))
            return measured
        finally:
            watcher.stop()


def _collect(root: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(COLLECT, cwd=root, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the bare collection failed:\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=7)
    parser.add_argument("--modes", nargs="+", default=["fork"], choices=["fork", "spawn"])
    parser.add_argument("--scenario", default="fix", choices=["fix", "same"])
    args = parser.parse_args()
    import jax

    print(f"`python bench/watch_latency.py --saves {args.saves} --modes {' '.join(args.modes)} --scenario "
          f"{args.scenario}`: Python {platform.python_version()}, jax {jax.__version__}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| runs | first answer / bare collection (median, warm) | whole file / bare collection (median, warm) "
          "| first answer, whole file, bare collection (median s, warm) | cold (first save): first, whole, "
          "collection | `changed:` line | load average (min-max) |")
    print("|---|---|---|---|---|---|---|")
    details = []
    for mode in args.modes:
        saves = measure(mode, args.saves, args.scenario)
        warm = saves[1:] or saves
        cold = saves[0]
        label = "forked from the warm watcher" if mode == "fork" else "`python -m pytest` per run"
        loads = [s.load for s in saves]
        print(f"| {label} | {statistics.median(s.first_ratio for s in warm):.2f}x "
              f"({min(s.first_ratio for s in warm):.2f}-{max(s.first_ratio for s in warm):.2f}) "
              f"| {statistics.median(s.whole_ratio for s in warm):.2f}x "
              f"({min(s.whole_ratio for s in warm):.2f}-{max(s.whole_ratio for s in warm):.2f}) "
              f"| {statistics.median(s.first for s in warm):.1f}, {statistics.median(s.whole for s in warm):.1f}, "
              f"{statistics.median(s.collection for s in warm):.1f} s "
              f"| {cold.first:.1f}, {cold.whole:.1f}, {cold.collection:.1f} s "
              f"| <= {max(s.noticed for s in saves):.2f} s | {min(loads):.1f}-{max(loads):.1f} |")
        details.append((label, saves))
    for label, saves in details:
        print(f"\n{label}, save by save (first answer / whole file / bare collection, s; load):\n")
        for number, save in enumerate(saves):
            test = save.first_line.split(",", 2)[1].split("(")[0].strip() if "," in save.first_line else "?"
            print(f"- {number}: {save.kind}: {save.first:.1f} / {save.whole:.1f} / {save.collection:.1f} "
                  f"(ratios {save.first_ratio:.2f}, {save.whole_ratio:.2f}; load {save.load:.1f}); first: {test}")


if __name__ == "__main__":
    main()
