"""Runs of the real chapters' graded tests, for the project's own tests: a warm worker
that runs several at a time.

Every stub, solution, mutant and equivalent check is a pytest run of a chapter in a
process of its own, as a learner's run would be. Started one after the other as
`python -m pytest` subprocesses, each paid Python's start and the import of pytest,
JAX and hypothesis (2-3 s) before its own work, one run at a time. Here one worker
process (chapter_worker.py) imports all that once and forks each run from it, and runs
as many at a time as the machine has cores. A test module declares, for each of its
tests, the run it needs (`ChapterJob`); the first test that asks for its result hands
every selected test's run to the worker, in the order the tests will ask, so the worker
stays busy while the tests read their results one by one.

`TPUCOURSE_CHAPTER_JOBS=N` sets how many runs go at a time (default: the CPUs this
process may use); `TPUCOURSE_CHAPTER_RUNS=spawn` starts each run as `python -m pytest`
instead of forking it from the warm worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tpucourse.core.profiles import DEFAULT_PROFILE

from .support import is_xdist_variable

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("chapter_worker.py")
JOBS_ENV = "TPUCOURSE_CHAPTER_JOBS"
MODE_ENV = "TPUCOURSE_CHAPTER_RUNS"


@dataclass(frozen=True)
class ChapterJob:
    """One pytest run of a chapter's graded tests (all its files, or `files`), in the checkout or
    in another copy of the course (`course`: a learner's tree with its own exercises/)."""

    chapter: str
    args: tuple[str, ...] = ()
    files: tuple[str, ...] | None = None
    stop_files: tuple[str, ...] = ()  # skip the rest of these files after their first failure
    course: Path = REPO

    def pytest_args(self, basetemp: Path) -> list[str]:
        folder = self.course / "exercises" / self.chapter
        targets = [str(folder / name) for name in self.files] if self.files is not None else [str(folder)]
        # The learner's hypothesis profile, whether CI is set or not: a run draws (and prints) here
        # what `pytest exercises/chNN` draws on a learner's machine, which the READMEs quote.
        profile = () if "--hypothesis-profile" in self.args else ("--hypothesis-profile", DEFAULT_PROFILE)
        return [f"--basetemp={basetemp}", *targets, "--rootdir", str(self.course), "-p", "no:cacheprovider",
                *profile, *self.args]


def default_jobs() -> int:
    if os.environ.get(JOBS_ENV):
        return max(1, int(os.environ[JOBS_ENV]))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class ChapterRunner:
    """The warm worker and the runs handed to it, each known by a key (a test's node id)."""

    def __init__(self, workdir: Path, jobs: int | None = None, spawn: bool | None = None):
        self.workdir = Path(workdir)
        self.jobs = jobs or default_jobs()
        self.spawn = (os.environ.get(MODE_ENV) == "spawn" or not hasattr(os, "fork")) if spawn is None else spawn
        # Hand every selected run in at the first request (False in a pytest-xdist worker,
        # which does not know which tests it will get: each run is handed in when asked for).
        self.ahead = True
        self._process: subprocess.Popen | None = None
        self._submitted: dict[str, Path] = {}
        self._done: dict[str, dict] = {}
        self._paths = 0
        self.started: float | None = None  # perf_counter when the worker started
        self.finished: float | None = None  # ... and when it was closed

    def fresh_path(self, prefix: str) -> Path:
        """A path under the runner's directory that nothing uses yet (not created)."""
        self._paths += 1
        return self.workdir / f"{prefix}-{self._paths}"

    @property
    def seconds(self) -> dict[str, float]:
        """Wall time of each finished run, by key."""
        return {key: answer["seconds"] for key, answer in self._done.items()}

    def _start(self) -> subprocess.Popen:
        if self._process is None:
            self.started = time.perf_counter()
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS") and not is_xdist_variable(k)}
            command = [sys.executable, str(WORKER), "--jobs", str(self.jobs)] + (["--spawn"] if self.spawn else [])
            self._process = subprocess.Popen(
                command, cwd=self.workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=open(self.workdir / "worker.log", "wb"), text=True, bufsize=1,
                start_new_session=True)
            ready = self._process.stdout.readline()
            if not ready:
                raise RuntimeError(f"the chapter worker did not start: see {self.workdir / 'worker.log'}")
        return self._process

    def submit(self, key: str, job: ChapterJob) -> None:
        """Hand a run to the worker (once per key); it starts when a slot is free."""
        if key in self._submitted:
            return
        cwd = self.workdir / f"run-{len(self._submitted)}"
        cwd.mkdir(parents=True)
        self._submitted[key] = cwd
        request = {"id": key, "cwd": str(cwd), "args": job.pytest_args(cwd / "basetemp"),
                   "stop_files": list(job.stop_files),
                   "env": {"HOME": str(cwd), "USERPROFILE": str(cwd), "PY_COLORS": "0"}}
        process = self._start()
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()

    def submitted(self, key: str) -> bool:
        return key in self._submitted

    def result(self, key: str) -> pytest.RunResult:
        """Wait for the run handed in under `key`; its exit code and output as pytester's."""
        while key not in self._done:
            line = self._process.stdout.readline()
            if not line:
                raise RuntimeError(f"the chapter worker stopped: see {self.workdir / 'worker.log'}")
            answer = json.loads(line)
            self._done[answer["id"]] = answer
        answer, cwd = self._done[key], self._submitted[key]
        read = lambda name: (cwd / name).read_text(errors="replace").splitlines()  # noqa: E731
        return pytest.RunResult(answer["ret"], read("stdout.txt"), read("stderr.txt"), answer["seconds"])

    def close(self) -> None:
        """Stop the worker and every run still going (a session that ends early)."""
        if self._process is None:
            return
        self.finished = time.perf_counter()
        try:
            os.killpg(self._process.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self._process.wait()
        self._process = None


def prelaunch(runner: ChapterRunner, items, jobs_of) -> None:
    """Hand every selected test's run to the runner, in test order (a pytest-xdist worker, which
    does not know which tests it will get, hands in each run when its test asks instead)."""
    for item in items:
        if runner.submitted(item.nodeid):
            continue
        job = jobs_of(item)
        if job is not None:
            runner.submit(item.nodeid, job)


def declared_runs(items) -> list:
    """The selected tests whose module declares chapter runs (a module-level `chapter_job(item,
    runner)`), in test order."""
    return [item for item in items if hasattr(getattr(item, "module", None), "chapter_job")]


def launch_at_start(runner: ChapterRunner, items) -> None:
    """Hand in every declared run of the session before its first test runs.

    The chapter runs are most of the project's suite. Handed in only when the first chapter
    test asks, they ran after every test before them, and those ran one at a time with the
    second core idle; handed in at the start, the worker's runs share the machine with the
    session's own tests, and the chapter tests later find most of their runs done.
    """
    prelaunch(runner, declared_runs(items), lambda item: item.module.chapter_job(item, runner))


def wait_for(runner: ChapterRunner, item, job_of) -> pytest.RunResult:
    """The run of `item`; unless the runner hands runs in one by one (runner.ahead), every
    selected run of the item's module is handed in first."""
    if runner.ahead and not runner.submitted(item.nodeid):
        prelaunch(runner, [i for i in item.session.items if i.module is item.module], job_of)
    if not runner.submitted(item.nodeid):
        runner.submit(item.nodeid, job_of(item))
    start = time.perf_counter()
    result = runner.result(item.nodeid)
    result.waited = time.perf_counter() - start
    return result
