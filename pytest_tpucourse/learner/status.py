"""Where an exercise stands, and how the summary, `tpucourse progress` and watch say it."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """An exercise's status; its value is what the state file stores."""

    DONE = "done"  # every graded test ran and passed in one run of exercises/
    FAILED = "failed"
    TODO = "todo"  # the stub still raises NotImplementedError
    PARTIAL = "partial"  # some tests passed, the rest did not run
    CHANGED = "changed"  # done, then the module was edited (the state file only)
    NOT_COUNTED = "not counted"  # passed, but not as the course grades (docs/earned.md)
    NOT_RUN = "not run"

    @property
    def mark(self) -> str:
        """Four columns wide, for the exercise lines of the summary and of `tpucourse progress`."""
        return _MARKS[self]

    @property
    def words(self) -> str:
        """In a sentence: "ch11.matmul is <words>"."""
        return _WORDS[self]


class Confirmation(StrEnum):
    """How far an exercise's done is confirmed: by the trusted check, which judges its values outside
    the process the learner's code ran in (docs/grading.md), or by the learner's own run only."""

    CONFIRMED = "confirmed"  # the trusted check agreed, on the module bytes it is done with
    DISAGREES = "disagrees"  # the trusted check disagreed, on those bytes
    OWN_RUN = "your run only"  # never checked outside the run's process, or checked on other bytes


_MARKS = {Status.DONE: "done", Status.FAILED: "FAIL", Status.TODO: "TODO", Status.PARTIAL: "part",
          Status.CHANGED: "edit", Status.NOT_COUNTED: "void", Status.NOT_RUN: "----"}
_WORDS = {Status.DONE: "done", Status.FAILED: "failing", Status.TODO: "not written yet",
          Status.PARTIAL: "partly run", Status.CHANGED: "edited since it passed",
          Status.NOT_COUNTED: "not counted",
          Status.NOT_RUN: "not run yet"}
