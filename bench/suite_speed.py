"""Wall time of grading a chapter's solutions, per interpret mode.

    python bench/suite_speed.py                 # chapter 11, dev profile, 3 runs per mode
    python bench/suite_speed.py --chapter ch11 --profile ci --runs 5

Prints a Markdown table ready for docs/speed.md. Each run is a fresh
`python -m pytest` process, as a learner's would be, so the times include
starting Python and importing JAX (about 1 s). Every mode starts from an empty
compilation cache (--jax-cache): the first run is the cold one, a learner's
first run; the median of the others is a learner's re-run. This measures the
grader on this machine, not any kernel's speed on a TPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("tpu", "fast")


def time_suite(chapter: str, mode: str, profile: str, cache: Path) -> float:
    command = [
        sys.executable, "-m", "pytest", f"exercises/{chapter}", "--solutions", "-q",
        "-p", "no:cacheprovider", "--interpret", mode, "--hypothesis-profile", profile,
        "--jax-cache", str(cache),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="ch11")
    parser.add_argument("--profile", default="dev")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    print(f"pytest exercises/{args.chapter} --solutions --hypothesis-profile {args.profile}; "
          f"{args.runs} runs per mode; {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}")
    print()
    print("| --interpret | first run (cold cache) | re-runs: median | min | max |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        with tempfile.TemporaryDirectory() as cache:
            cold = time_suite(args.chapter, mode, args.profile, Path(cache))
            warm = [time_suite(args.chapter, mode, args.profile, Path(cache))
                    for _ in range(max(1, args.runs - 1))]
        print(f"| {mode} | {cold:.1f} s | {statistics.median(warm):.1f} s | {min(warm):.1f} s | "
              f"{max(warm):.1f} s |", flush=True)


if __name__ == "__main__":
    main()
