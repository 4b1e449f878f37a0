"""A chapter graded under two Pythons (two JAX versions), paired: the venvs alternate run by run.

    python bench/jax_versions.py --chapters ch11 ch13 --rounds 3          # cold, .venv then .venv-newest
    python bench/jax_versions.py --chapters ch13 --warm --rounds 3
    python bench/jax_versions.py --pythons .venv/bin/python .venv-newest/bin/python --chapters ch11

Each run is a fresh `python -m pytest exercises/chNN --solutions` process in this checkout, as
a learner's. Cold: every run gets an empty --jax-cache of its own (a learner's first run);
`--warm`: each Python keeps one --jax-cache filled by a run before the rounds. Round by round
the order of the Pythons alternates, so that the load on a shared machine moves both sides of a
pair; the figure to read is the median of the per-round ratios (second Python / first), in wall
and in CPU (user + system of pytest and its children). This measures the grader on this
machine, not any kernel's speed on a TPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def graded(python: str, chapter: str, cache: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the chapter's solutions graded with `cache` as --jax-cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTHONPATH")}
    env["TPUCOURSE_WARM"] = "0"  # a cold run is a fresh process: no warm process answers it
    cpu, start = _cpu_of_children(), time.perf_counter()
    done = subprocess.run([python, "-m", "pytest", f"exercises/{chapter}", "--solutions", "-q",
                           "-p", "no:cacheprovider", "--jax-cache", str(cache)],
                          cwd=REPO, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - start, _cpu_of_children() - cpu
    if done.returncode != 0:
        sys.exit(f"{python}: {chapter} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return wall, cpu


def version_of(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys, jax; print(sys.version.split()[0], jax.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    return f"Python {out[0]}, jax {out[1]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pythons", nargs=2, default=[str(REPO / ".venv/bin/python"),
                                                       str(REPO / ".venv-newest/bin/python")])
    parser.add_argument("--chapters", nargs="+", default=["ch11", "ch13"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="each Python keeps a filled --jax-cache")
    args = parser.parse_args()
    pythons = [os.path.abspath(p) for p in args.pythons]
    base = Path(tempfile.mkdtemp(prefix="jax-versions-"))
    loads = [os.getloadavg()[0]]
    rows: dict[str, list] = {c: [] for c in args.chapters}
    try:
        kept = {p: base / f"kept{i}" for i, p in enumerate(pythons)}
        if args.warm:
            for chapter in args.chapters:
                for python in pythons:
                    graded(python, chapter, kept[python])
        for number in range(args.rounds):
            for chapter in args.chapters:
                order = pythons if number % 2 == 0 else pythons[::-1]
                pair = {}
                for python in order:
                    cache = kept[python] if args.warm else base / f"cold-{number}-{chapter}-{pythons.index(python)}"
                    pair[python] = graded(python, chapter, cache)
                    if not args.warm:
                        shutil.rmtree(cache, ignore_errors=True)
                rows[chapter].append(tuple(pair[p] for p in pythons))
                print(f"  round {number} {chapter}: " + "; ".join(
                    f"{version_of(p)} {pair[p][0]:.1f} s wall, {pair[p][1]:.1f} s CPU" for p in pythons),
                    file=sys.stderr, flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    first, second = (version_of(p) for p in pythons)
    print(f"`python bench/jax_versions.py --chapters {' '.join(args.chapters)} --rounds {args.rounds}"
          f"{' --warm' if args.warm else ''}`: {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, "
          f"load average {min(loads):.1f}-{max(loads):.1f}\n")
    print(f"| chapter, {'warm' if args.warm else 'cold'} | {first}: wall, CPU (median) | {second}: wall, CPU (median) "
          f"| ratio, wall (median, range) | ratio, CPU (median, range) |")
    print("|---|---|---|---|---|")
    for chapter, pairs in rows.items():
        wall = [b[0] / a[0] for a, b in pairs]
        cpu = [b[1] / a[1] for a, b in pairs]
        cells = [f"{statistics.median(p[i][0] for p in pairs):.1f} s, {statistics.median(p[i][1] for p in pairs):.1f} s"
                 for i in (0, 1)]
        print(f"| {chapter} | {cells[0]} | {cells[1]} | {statistics.median(wall):.2f}x ({min(wall):.2f}-{max(wall):.2f}) "
              f"| {statistics.median(cpu):.2f}x ({min(cpu):.2f}-{max(cpu):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
