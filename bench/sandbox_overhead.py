"""What a tree's sandbox costs on its own, for docs/speed.md: making it (the tree copied, the
compile cache linked or copied), one `python -c pass` in it, and removing it, against the
same command with no sandbox (`--no-sandbox`), taking turns, REPEATS times each.

    python bench/sandbox_overhead.py [REPEATS=20] [CACHE=.tpucourse/jax-cache]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_tpucourse.classroom.sandbox import CourseView, Isolation, TreeSandbox, find_isolation

ROOT = Path(__file__).resolve().parents[1]


def once(isolation: Isolation, tree: Path, cache: Path, folder: Path) -> tuple[float, float]:
    """Seconds to make the sandbox and run the command in it, and to remove it."""
    start = time.perf_counter()
    box = TreeSandbox(tree, folder, CourseView.of(ROOT, hidden=[tree]), isolation, shared_cache=cache)
    ran = box.run([sys.executable, "-c", "pass"], timeout=120)
    assert ran.exit_status == 0, ran.stderr
    made_and_ran = time.perf_counter() - start
    start = time.perf_counter()
    box.close()
    return made_and_ran, time.perf_counter() - start


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    cache = (ROOT / (sys.argv[2] if len(sys.argv) > 2 else ".tpucourse/jax-cache")).resolve()
    files = sum(len(f) for _, _, f in os.walk(cache))
    print(f"load average at the start: {' '.join(open('/proc/loadavg').read().split()[:3])}; "
          f"the compile cache: {files} files")
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work) / "class" / "t01"
        (tree / "ch11").mkdir(parents=True)
        for source in (ROOT / "solutions" / "ch11").glob("*.py"):
            (tree / "ch11" / source.name).write_bytes(source.read_bytes())
        times: dict[str, list[tuple[float, float]]] = {"none": [], "bubblewrap": []}
        isolations = {"none": Isolation.none(), "bubblewrap": find_isolation()}
        for i in range(repeats):
            for name, isolation in isolations.items():
                times[name].append(once(isolation, tree, cache, Path(work) / f"{name}-{i}"))
    for name, pairs in times.items():
        made = [p[0] for p in pairs]
        removed = [p[1] for p in pairs]
        print(f"{name:>10}: made and `python -c pass` run: median {statistics.median(made) * 1000:.0f} ms "
              f"(min {min(made) * 1000:.0f}); removed: median {statistics.median(removed) * 1000:.0f} ms")
    print(f"load average at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
