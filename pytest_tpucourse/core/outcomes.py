"""How a graded test ends when the learner's code is the reason.

Each outcome carries a short, complete message (what was called, which file to
edit, what was expected, what came back). The plugin reports these without a
traceback: the traceback would point into the plugin and JAX, never at the
learner's line.
"""

from __future__ import annotations

import re

import pytest

# What code under grading may raise, all of it its own failure: any Exception, and pytest's
# outcomes (pytest.skip(), fail(), xfail(), importorskip() raise BaseExceptions), which graded
# code must not use to end a test or a gate's check: a skip would count as finished.
RAISED_BY_GRADED_CODE = (Exception, pytest.skip.Exception, pytest.fail.Exception)


class GradingOutcome(Exception):
    """Base class: the message is the whole report; `headline` says it in one line (the run's
    summary, `tpucourse progress` and watch show it), by default the message's first line."""

    def __init__(self, message: str, headline: str | None = None, *, evidence=None, suffix: str = "",
                 inputs_matter: bool = True):
        super().__init__(message + suffix)
        self.message = message + suffix
        self.headline = headline or headline_of(message)
        # False for a verdict on the code itself (it uses the shipped solution, it runs no kernel):
        # which inputs a property test drew says nothing about it, and is left out of the report.
        self.inputs_matter = inputs_matter
        # evidence: () -> lines that explain the failure, gathered by running the call again
        # (diagnosis/): computed once, when the report is written, and placed before `suffix`
        # (the reproduction). A failure that is caught and never reported costs nothing.
        self._parts = (message, suffix)
        self._evidence = evidence
        self._said: list[str] | None = None

    def render(self) -> str:
        if self._evidence is None:
            return self.message
        if self._said is None:
            try:
                self._said = [line for line in self._evidence() if line]
            except Exception:  # evidence is a courtesy: never a traceback instead of the report
                self._said = []
        head, suffix = self._parts
        return "\n".join([head, *(f"  {line}" for line in self._said)]) + suffix

    def with_suffix(self, more: str) -> "GradingOutcome":
        """The same outcome with `more` after its message (a note on the setting it failed
        under), its evidence kept."""
        head, suffix = self._parts
        again = type(self)(head, self.headline, evidence=self._evidence, suffix=suffix + more,
                           inputs_matter=self.inputs_matter)
        again._said = self._said
        return again


def first_line(text: str) -> str:
    """The first non-empty line of a report, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# JAX's and Pallas' advice to file a bug or an issue, which its errors end with: never the
# learner's business, and cut mid-sentence it reads as the course's own failure.
JAX_ADVICE = re.compile(r"\s*(Please file (?:a bug|an issue) at \S+|See details at \S+|Pallas encountered an "
                        r"internal verification error\.)")


def without_jax_advice(text: str) -> str:
    """A toolchain's message without JAX's advice to file a bug, and without the lines it leaves blank."""
    lines = []
    for line in text.splitlines():
        kept = JAX_ADVICE.sub("", line).strip()
        if kept:
            lines.append(line[:len(line) - len(line.lstrip())] + kept)  # the line's own indent
    return "\n".join(lines)


def headline_of(text: str) -> str:
    """A report in one line: its first line, and where that ends in a colon (`... raised:`),
    what the colon introduces, so no summary line ends on a bare colon."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head, following = lines[0], lines[1:]
    while head.endswith(":") and following:  # `... say 'mosaic':` / `the compiler rejects ...:` / its words
        head = f"{head} {following.pop(0)}"
    return head.rstrip(":")


class Todo(GradingOutcome):
    """The learner has not written this function yet (the stub still raises)."""


class LearnerCodeError(GradingOutcome):
    """The learner's code raised, could not be imported, or is missing."""


class WrongResult(GradingOutcome, AssertionError):
    """The learner's code ran but its result is wrong (shape, dtype, NaN, values)."""


class CheckerError(GradingOutcome):
    """The graded test itself is wrong (its oracle or floor raised, bad arguments)."""
