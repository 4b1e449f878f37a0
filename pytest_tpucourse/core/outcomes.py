"""How a graded test ends when the learner's code is the reason.

Each outcome carries a short, complete message (what was called, which file to
edit, what was expected, what came back). The plugin reports these without a
traceback: the traceback would point into the plugin and JAX, never at the
learner's line.
"""

from __future__ import annotations

import pytest

# What code under grading may raise, all of it its own failure: any Exception, and pytest's
# outcomes (pytest.skip(), fail(), xfail(), importorskip() raise BaseExceptions), which graded
# code must not use to end a test or a gate's check: a skip would count as finished.
RAISED_BY_GRADED_CODE = (Exception, pytest.skip.Exception, pytest.fail.Exception)


class GradingOutcome(Exception):
    """Base class: the message is the whole report; `headline` says it in one line (the run's
    summary, `tpucourse progress` and watch show it), by default the message's first line."""

    def __init__(self, message: str, headline: str | None = None):
        super().__init__(message)
        self.message = message
        self.headline = headline or first_line(message)

    def render(self) -> str:
        return self.message


def first_line(text: str) -> str:
    """The first non-empty line of a report, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class Todo(GradingOutcome):
    """The learner has not written this function yet (the stub still raises)."""


class LearnerCodeError(GradingOutcome):
    """The learner's code raised, could not be imported, or is missing."""


class WrongResult(GradingOutcome, AssertionError):
    """The learner's code ran but its result is wrong (shape, dtype, NaN, values)."""


class CheckerError(GradingOutcome):
    """The graded test itself is wrong (its oracle or floor raised, bad arguments)."""
