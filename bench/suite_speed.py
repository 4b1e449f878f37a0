"""Wall and CPU time of grading: a chapter's solutions per interpret mode, one test file, or the
time a learner waits for the first TODO line of a stub.

    python bench/suite_speed.py                          # chapter 11, dev profile, 3 runs per mode
    python bench/suite_speed.py --chapter ch11 --profile ci --runs 5
    python bench/suite_speed.py --chapter ch01 --ci      # with CI=true, as CI runs it (ci profile)
    python bench/suite_speed.py --chapter ch11 --files test_matmul.py --modes tpu
    python bench/suite_speed.py --todo exercises/ch11/test_matmul.py --runs 7
    python bench/suite_speed.py --chapter ch13 --root /tmp/before   # another checkout of the
                                                         # course (before a change), same venv

Prints Markdown ready for docs/speed.md. Each run is a fresh `python -m pytest` process, as
a learner's would be, so the times include starting Python and importing JAX. Every mode
starts from an empty compilation cache (--jax-cache): the first run is the cold one, a
learner's first run; the median of the others is a learner's re-run. CPU is the user + system
time of the pytest process and its children: on a machine shared with other jobs it moves far
less than the wall time. This measures the grader on this machine, not any kernel's speed on a
TPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("tpu", "fast")


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _environment(root: Path, ci: bool) -> dict:
    env = dict(os.environ)
    env["TPUCOURSE_WARM"] = "0"  # each run a fresh process, as the figures say: no warm process answers it
    if root != REPO:  # grade with that checkout's package, from this environment
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    if ci:
        env["CI"] = "true"
    else:
        env.pop("CI", None)
    return env


def time_suite(root: Path, targets: list[str], mode: str, profile: str | None, cache: Path,
               ci: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of grading `targets` with the solutions."""
    command = [
        sys.executable, "-m", "pytest", *targets, "--solutions", "-q",
        "-p", "no:cacheprovider", "--interpret", mode, "--jax-cache", str(cache),
        *(["--hypothesis-profile", profile] if profile else []),
    ]
    cpu, start = _cpu_of_children(), time.perf_counter()
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=_environment(root, ci))
    elapsed, cpu = time.perf_counter() - start, _cpu_of_children() - cpu
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}")
    return elapsed, cpu


def time_to_first_todo(root: Path, target: str, ci: bool) -> float:
    """Seconds from starting `pytest TARGET -x` on the stubs to its first TODO message line."""
    command = [sys.executable, "-m", "pytest", target, "-x", "-p", "no:cacheprovider"]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=_environment(root, ci))
    seen = None
    for line in process.stdout:
        if seen is None and ("TODO:" in line or "is not written yet" in line):
            seen = time.perf_counter() - start
    process.wait()
    if seen is None:
        sys.exit(f"{' '.join(command)} printed no TODO line")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="ch11")
    parser.add_argument("--files", nargs="*", help="only these test files of the chapter")
    parser.add_argument("--profile", default=None, help="hypothesis profile (default: the course's, "
                        "dev, or ci with --ci)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES)
    parser.add_argument("--ci", action="store_true", help="run with CI=true, as CI does")
    parser.add_argument("--todo", metavar="TEST_FILE", help="time to the first TODO line of this "
                        "stub test file (pytest -x) instead")
    parser.add_argument("--root", type=Path, default=REPO, help="the course checkout to grade")
    args = parser.parse_args()
    root = args.root.resolve()
    machine = (f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
               f"{platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}, load average "
               f"{os.getloadavg()[0]:.1f} at the start" + (", CI=true" if args.ci else ""))

    if args.todo:
        times = [time_to_first_todo(root, args.todo, args.ci) for _ in range(args.runs)]
        print(f"pytest {args.todo} -x (stubs): first TODO line after {statistics.median(times):.2f} s "
              f"(median of {len(times)}; min {min(times):.2f} s, max {max(times):.2f} s); {machine}")
        return

    folder = f"exercises/{args.chapter}"
    targets = [f"{folder}/{name}" for name in args.files] if args.files else [folder]
    print(f"pytest {' '.join(targets)} --solutions, hypothesis profile "
          f"{args.profile or ('ci' if args.ci else 'dev')}; {args.runs} runs per mode; {machine}")
    print()
    print("| --interpret | first run (cold cache) | re-runs: median | min | max | CPU: first | CPU: re-runs |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.modes:
        with tempfile.TemporaryDirectory() as cache:
            cold = time_suite(root, targets, mode, args.profile, Path(cache), args.ci)
            warm = [time_suite(root, targets, mode, args.profile, Path(cache), args.ci)
                    for _ in range(max(1, args.runs - 1))]
        walls = [w for w, _ in warm]
        print(f"| {mode} | {cold[0]:.1f} s | {statistics.median(walls):.1f} s | {min(walls):.1f} s | "
              f"{max(walls):.1f} s | {cold[1]:.1f} s | {statistics.median(c for _, c in warm):.1f} s |",
              flush=True)


if __name__ == "__main__":
    main()
