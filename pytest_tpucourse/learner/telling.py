"""Which of a run's failures tells the learner most: the one rule the run's summary, the state
file's message and `tpucourse watch` follow.

A failure is telling when it names its cause (and, better, the line to change). A structural
verdict does: a race, an out-of-bounds block index, a hang, the TPU lowering's refusal, the
learner's own exception with its line, a result of the wrong dtype or shape. A value mismatch
says only that the numbers are off, and a NaN report lists suspects. So a file that fails
three ways (a "parallel" k axis: two NaN reports and the race check) is summed up by the race.

The kinds, most telling first (KINDS); a failure is judged by its headline, the one line the
summary, the state file and watch show, and failures of one kind keep the order they ran in:

    not written     the stub still raises (TODO): the exercise's status, nothing else to read
    race            two cores or devices touch one buffer unordered; a semaphore left counting
    out of bounds   a block index past the array
    hang            a deadlock, or a kernel past its deadline
    refused         the TPU lowering or compiler refuses the program
    raised          the learner's code raised: the error and its line
    dtype or shape  the result has the wrong dtype or shape
    verdict         any other verdict on the program or an answer (no pallas_call, a schedule, ...)
    values          the values differ from the reference
    non-finite      NaN or Inf in the output, with the suspects that fit
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar


@dataclass(frozen=True)
class Kind:
    rank: int  # 0 is the most telling
    name: str
    words: str  # "the most telling failure is <words>"


NOT_WRITTEN = Kind(0, "not written", "a function not written yet")
RACE = Kind(1, "race", "a data race")
OUT_OF_BOUNDS = Kind(2, "out of bounds", "an out-of-bounds block index")
HANG = Kind(3, "hang", "a kernel that never finishes")
REFUSED = Kind(4, "refused", "the TPU lowering's refusal")
RAISED = Kind(5, "raised", "an error your code raised")
DTYPE_OR_SHAPE = Kind(6, "dtype or shape", "a wrong dtype or shape")
VERDICT = Kind(7, "verdict", "a verdict on your program")
VALUES = Kind(8, "values", "wrong values")
NON_FINITE = Kind(9, "non-finite", "NaN or Inf in the output")

KINDS = (NOT_WRITTEN, RACE, OUT_OF_BOUNDS, HANG, REFUSED, RAISED, DTYPE_OR_SHAPE, VERDICT, VALUES, NON_FINITE)

# Checked in this order (not the rank's): a NaN report also says "where the reference is", an
# out-of-bounds index is an IndexError the kernel raised. Each pattern is a phrase the course's
# own reports use (checks.py, checking/tpu_rules.py, grading/messages.py, grading/calls.py).
_PATTERNS: tuple[tuple[Kind, re.Pattern], ...] = tuple((kind, re.compile(pattern)) for kind, pattern in (
    (NOT_WRITTEN, r"^TODO: |\bis not written yet\b"),
    (NON_FINITE, r"\bhas [\d,]+ (NaN|Inf)\b"),
    (RACE, r"\bdata race\b|grid steps run in another order|semaphores that are not back at zero"
           r"|lets a copy land before"),
    (OUT_OF_BOUNDS, r"(?i)\bout-of-bounds block index\b"),
    (HANG, r"\bdeadlocked\b|\bdid not finish within\b"),
    (REFUSED, r"\bwould not (compile|lower)\b|\bhas no Mosaic\b|\blowering rejects\b"),
    (RAISED, r"\braised [\w.]*(Error|Exception|Exit|Interrupt)\b"),
    (DTYPE_OR_SHAPE, r"\bhas (dtype|shape) .*, expected\b|\bshould be an array of shape\b"),
    (VALUES, r"\bis wrong: relative error\b|\bdiffers in [\d,]+ of\b|\bwhere the reference is\b"),
))


def kind_of(headline: str) -> Kind:
    """The kind of a failure from its headline (a failure the rules do not name is a VERDICT)."""
    for kind, pattern in _PATTERNS:
        if pattern.search(headline or ""):
            return kind
    return VERDICT


T = TypeVar("T")


def by_telling(failures: Iterable[T], headline: Callable[[T], str] = str) -> list[T]:
    """The failures, most telling first; those of one kind in the order given."""
    return sorted(failures, key=lambda failure: kind_of(headline(failure)).rank)


def most_telling(failures: Iterable[T], headline: Callable[[T], str] = str) -> T | None:
    """The most telling failure (the first of its kind), or None when there is none."""
    ordered = by_telling(failures, headline)
    return ordered[0] if ordered else None
