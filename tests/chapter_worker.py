"""A warm worker that runs pytest on the real chapters, several runs at a time.

Started by tests/chapter_runs.py as `python tests/chapter_worker.py --jobs N`. It imports
pytest, its plugins, JAX, NumPy, hypothesis and the course's package once, then forks one
child per requested run: each child is a fresh pytest process, as `python -m pytest`
would start it, without paying Python's start and those imports again (about 2 s of the
3-5 s a mutant run takes). JAX's backends are never started here, so the children fork
from a process with no XLA threads, and each child starts its own backend as a
subprocess run would (its own CPU device count, its own compiled programs).

Protocol (JSON, one object per line): stdin takes
  {"id": ..., "cwd": DIR, "args": [...], "stop_files": [...]}
and stdout answers {"id": ..., "ret": EXIT_CODE, "seconds": WALL} when the run ends; the
run's stdout and stderr are DIR/stdout.txt and DIR/stderr.txt. At most N runs at a time.

stop_files: test files (names, `test_matmul.py`) whose remaining tests are skipped once
one of their tests failed. A mutant only has to fail each file it names once; the files
it must pass still run every test.

With --spawn the runs are `python -m pytest` subprocesses instead of forks (the same
protocol; for platforms without fork, and to measure what the warm start saves).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

STOP_FILES_ENV = "TPUCOURSE_STOP_FILES"  # --spawn: the stop files, for the -p plugin below


class StopFileAtFirstFailure:
    """Skip the rest of a test file once one of its tests failed (for the files named)."""

    def __init__(self, files):
        self.files = set(files)
        self.failed: set[str] = set()

    def pytest_runtest_setup(self, item):
        import pytest

        if item.path.name in self.failed:
            pytest.skip(f"{item.path.name} already failed once: the mutant is caught there")

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        if report.when == "call" and report.failed and name in self.files:
            self.failed.add(name)


def pytest_configure(config):
    """Loaded with -p chapter_worker in --spawn runs: the stop files come from the environment."""
    files = [f for f in os.environ.get(STOP_FILES_ENV, "").split(",") if f]
    if files:
        config.pluginmanager.register(StopFileAtFirstFailure(files), "tpucourse-stop-files")


def preload() -> bool:
    """Import what every run imports, without starting JAX's backends (a child forked after
    they start waits forever on compile threads it does not have); whether forking is safe.
    The package's own warm runs (`tpucourse watch`) preload the same way."""
    from pytest_tpucourse.learner import warm_runs

    return warm_runs.preload()


def run_forked(job: dict) -> int:
    """Fork a child that runs pytest for `job`; returns its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.chdir(job["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        os.environ.update(job.get("env", {}))
        sys.path[0] = os.getcwd()  # as `python -m pytest` run from the job's directory
        sys.argv = [sys.argv[0]]
        from pytest_tpucourse.learner.warm_runs import pytest_main_then_exit

        plugins = [StopFileAtFirstFailure(job["stop_files"])] if job.get("stop_files") else []
        pytest_main_then_exit(job["args"], plugins)  # never returns
    finally:  # reached only when the setup above failed: never return into the worker's loop
        import traceback

        traceback.print_exc()
        os._exit(3)


def run_spawned(job: dict) -> subprocess.Popen:
    env = {**os.environ, **job.get("env", {})}
    args = list(job["args"])
    if job.get("stop_files"):
        env[STOP_FILES_ENV] = ",".join(job["stop_files"])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                          env.get("PYTHONPATH")]))
        args = ["-p", "chapter_worker", *args]
    cwd = Path(job["cwd"])
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=open(cwd / "stdout.txt", "wb"),
                            stderr=open(cwd / "stderr.txt", "wb"))


# A run that has not ended after this long is stopped and answered as failed (exit code 124),
# so that a hung run fails its test instead of holding the whole suite until CI's limit.
RUN_TIMEOUT_SECONDS = 1200


def serve(jobs: int, spawn: bool) -> None:
    queue: list[dict] = []
    running: dict = {}  # pid or Popen -> (job, start)
    pending = b""
    stdin = sys.stdin.fileno()
    open_input = True

    def answer(job, code, start):
        print(json.dumps({"id": job["id"], "ret": code, "seconds": time.perf_counter() - start}), flush=True)

    while open_input or queue or running:
        while queue and len(running) < jobs:
            job = queue.pop(0)
            handle = run_spawned(job) if spawn else run_forked(job)
            running[handle] = (job, time.perf_counter())
        if open_input:
            ready, _, _ = select.select([stdin], [], [], 0.05)
            if ready:
                chunk = os.read(stdin, 65536)
                if not chunk:
                    open_input = False
                pending += chunk
                *lines, pending = pending.split(b"\n")
                queue.extend(json.loads(line) for line in lines if line.strip())
        else:
            time.sleep(0.05)
        for handle in list(running):
            job, start = running[handle]
            if spawn:
                code = handle.poll()
            else:
                pid, status = os.waitpid(handle, os.WNOHANG)
                code = None if pid == 0 else os.waitstatus_to_exitcode(status)
            if code is None:
                if time.perf_counter() - start < RUN_TIMEOUT_SECONDS:
                    continue
                code = _stop_hung_run(handle, spawn, job)
            running.pop(handle)
            answer(job, code, start)


def _stop_hung_run(handle, spawn: bool, job: dict) -> int:
    """Kill a run past RUN_TIMEOUT_SECONDS; its stderr says so."""
    if spawn:
        handle.kill()
        handle.wait()
    else:
        os.kill(handle, 9)
        os.waitpid(handle, 0)
    with open(Path(job["cwd"]) / "stderr.txt", "a") as stderr:
        stderr.write(f"\nchapter worker: the run did not end within {RUN_TIMEOUT_SECONDS} s and was killed\n")
    return 124


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--spawn", action="store_true", help="python -m pytest subprocesses, no fork")
    args = parser.parse_args()
    spawn = args.spawn
    if not spawn and not preload():  # forking now would deadlock the children: start each afresh
        print("chapter worker: JAX started while preloading; runs are spawned, not forked",
              file=sys.stderr, flush=True)
        spawn = True
    print(json.dumps({"ready": True}), flush=True)
    serve(max(1, args.jobs), spawn)


if __name__ == "__main__":
    main()
