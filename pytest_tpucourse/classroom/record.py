"""The end-of-run record: what a graded pytest process says about each exercise, in a file.

`tpucourse grade` starts one pytest process per tree, in the tree's sandbox, with
`--tpucourse-results FILE` (a file in its private folder) and a random token on a pipe it alone
inherits (its descriptor number in TPUCOURSE_RESULTS_TOKEN_FD). As
the run's last step (pytest_unconfigure, before the session closes) the plugin writes
FILE whole or not at all: the token, pytest's exit status, and per exercise its counts,
seconds and first failure's headline. A process that ends without writing it crashed.

The token is read from the pipe, which is then closed, when pytest starts, before any
graded module is imported: it is in no environment (another tree's process cannot read it
in /proc/PID/environ) and no file. Code of the tree that writes a results file of its own
cannot name it unless it digs it out of the process's memory. The record is what the tree's
own process says, not a proof: a tree's code runs in the process that writes it, and can
change it there (docs/grading.md, what the sandbox does not stop).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..core.outcomes import first_line

RESULTS_OPTION = "--tpucourse-results"
TOKEN_FD_ENV = "TPUCOURSE_RESULTS_TOKEN_FD"  # the inherited pipe's descriptor, not the token
TOKEN_BYTES = 256
FORMAT = 1


def read_token() -> str:
    """The token the grader gave this process, read once from its pipe (then closed): "" without one."""
    fd = os.environ.pop(TOKEN_FD_ENV, None)
    if fd is None or not fd.isdigit():
        return ""
    try:
        return os.read(int(fd), TOKEN_BYTES).decode("ascii", "replace")
    except OSError:
        return ""
    finally:
        try:
            os.close(int(fd))
        except OSError:
            pass


class EndOfRunRecord:
    """A registered plugin collecting each exercise's seconds and skip reasons; `write` at the end."""

    def __init__(self, path: Path, token: str, session):
        self.path = Path(path)
        self.token = token
        self.session = session  # the CourseSession: its progress holds the exercises' results
        self.seconds: dict[str, float] = {}
        self.skip_reasons: dict[str, str] = {}
        self.collection_errors: list[dict] = []

    @classmethod
    def from_config(cls, config: pytest.Config, session) -> EndOfRunRecord | None:
        path = config.getoption("tpucourse_results", None)
        if path is None:
            return None
        if session is None:
            raise pytest.UsageError(f"{RESULTS_OPTION} needs a course checkout (course.toml)")
        return cls(Path(path), read_token(), session)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        exercise = self.session.progress.exercise_of(report.nodeid)
        if exercise is None:
            return
        self.seconds[exercise.key] = self.seconds.get(exercise.key, 0.0) + (report.duration or 0.0)
        if report.skipped and exercise.key not in self.skip_reasons:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.skip_reasons[exercise.key] = first_line(str(reason)).removeprefix("Skipped: ")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collection_errors.append({"nodeid": report.nodeid, "message": first_line(report.longreprtext)})

    def write(self) -> None:
        """The record, replacing FILE at once (never half written); nothing when the run never
        reached its end (a usage error before the session started)."""
        exitstatus = self.session.exitstatus
        if exitstatus is None:
            return
        exercises = {}
        for key, entry in self.session.progress.results.items():
            exercises[key] = {
                "status": str(entry.status), "total": len(entry.collected | entry.deselected),
                "passed": len(entry.passed), "failed": len(entry.failed), "todo": len(entry.todo),
                "skipped": len(entry.skipped), "deselected": len(entry.deselected),
                "seconds": round(self.seconds.get(key, 0.0), 3), "message": entry.first_message,
                "skip_reason": self.skip_reasons.get(key, ""),
                "not_counted": entry.not_counted,  # why its passes do not count (docs/earned.md), or ""
            }
        record = {"format": FORMAT, "token": self.token, "exitstatus": int(exitstatus),
                  "exercises": exercises, "collection_errors": self.collection_errors,
                  "threads_left": self.session.threads_left()}  # the run would never have ended
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(record), encoding="utf-8")
        os.replace(partial, self.path)
