"""The causes a failure can name: a small fixed vocabulary, and the words each is said in.

Every shipped mutant of a kernel chapter names its cause from this list (`cause = ...` in
tests/mutants/chNN.toml, docs/authoring.md section 7), and the course's failure messages
name causes in these words. `first_suspect(report)` reads which cause a report names
first: the cause whose words appear earliest in it. tests/test_first_suspect.py measures,
over the kernel chapters' mutants, how often that is the mutant's own cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    name: str
    meaning: str
    said: tuple[str, ...]  # regular expressions: how the course's messages name it
    fallback: bool = False  # named only where a report names no other cause (its words are the symptom's)


CAUSES = (
    # Memory
    Cause("output block never written",
          "an output block that no grid step writes: a grid too small for the array, an index map "
          "that sends several steps to one block and none to another",
          (r"blocks of output \d+ of kernel \S+ (?:is|are) never written",)),
    Cause("never-written memory read",
          "a read of memory nothing wrote: a scratch or output buffer before its first write, the "
          "padding of an input block past a ragged edge, a copy's destination before its wait",
          (r"Memory never written is read",)),
    Cause("out-of-bounds block index",
          "an index map (or a device id) that points past the array",
          (r"Out-of-bounds block index", r"IndexError: list index out of range",
           r"names device -?\d+, which its mesh of \d+ devices does not have")),
    Cause("index clamped",
          "an index the caller got wrong clamped or wrapped into range instead of failing",
          (r"the index was clamped or wrapped",)),
    Cause("revisited output block",
          "a grid that leaves an output block and comes back to it, whose first visit is lost",
          (r"Revisited block",)),
    # Order
    Cause("parallel axis carries state",
          "a grid axis marked \"parallel\" whose steps depend on each other (a reduction, a running "
          "state): two cores, or another order, give another result",
          (r"parallel grid steps depend on their order", r"parallel grid steps run in another order",
           r"two cores touch one buffer without ordering", r"Dimensions with parallel semantics must form "
           r"a prefix")),
    Cause("unordered copy",
          "a copy between devices, or into a buffer, that no semaphore wait orders after what it depends "
          "on: a barrier that does not cover its destination, a semaphore shared by two copies",
          (r"lets a copy land before", r"starts a remote DMA before any barrier handshake",
           r"into the same semaphore may not have been waited for", r"a device or a DMA touches a buffer")),
    Cause("copy never waited",
          "a copy (or a signal) started and never waited for: a semaphore still counting when the "
          "kernel ends",
          (r"semaphores that are not back at zero", r"A copy is started and never waited for")),
    Cause("deadlock",
          "a wait that nothing will ever signal",
          (r"deadlocked", r"did not finish within")),
    Cause("no overlap",
          "right values, but every copy waited for before the compute that could hide it",
          (r"no copy ever runs behind compute", r"never computes while a copy is in flight")),
    # Arithmetic
    Cause("overflow", "a value past the dtype's largest: exp of a large argument, say",
          (r"The first Inf is an overflow", r"overflows to inf")),
    Cause("0/0", "a division of 0 by 0", (r"The first NaN is 0/0",)),
    Cause("inf - inf", "infinities that cancel (inf - inf, inf / inf, 0 * inf) from infinities "
          "already there", (r"infinities that cancel",)),
    Cause("division by zero", "x / 0 or log(0): an infinity from a zero",
          (r"The first Inf is (?:a division by zero|log\(0\))",)),
    Cause("non-finite arithmetic", "a NaN from another operation on finite values (sqrt or log of a "
          "negative number)", (r"The first NaN is made by",)),
    Cause("precision", "rounding in a narrow dtype: an accumulator or intermediate kept in bf16",
          (r"Rounding in (?:bfloat16|float16)",)),
    Cause("wrong values",
          "finite values off by more than the bound, and nothing else to show: a formula, a mask, "
          "an index, a step where something is done",
          (r" is wrong: relative error",), fallback=True),
    # The result's form
    Cause("wrong dtype", "a result in another dtype", (r"has dtype \w+, expected \w+",)),
    Cause("wrong shape", "a result of another shape or structure",
          (r"has shape \([^)]*\), expected", r"returned \d+ array\(s\)")),
    Cause("block shape mismatch",
          "a block shape that does not fit the arithmetic on it (a transposed BlockSpec, one block "
          "size for another)",
          (r"incompatible shapes for broadcasting", r"contracting dimensions to have the same shape")),
    # Structure and cost
    Cause("not a kernel", "the answer computed without a Pallas kernel", (r"contains no pallas_call",)),
    Cause("work outside the kernel",
          "arithmetic or data movement the kernel exists to keep inside it, done by XLA outside",
          (r"must be one Pallas kernel with all of its arithmetic inside", r"outside its Pallas kernels",
           r"lets XLA move the data")),
    Cause("block size ignored",
          "a grid that walks fewer steps than the schedule's blocks: a block size ignored, so one step "
          "holds more than the VMEM the block size budgets (all of K, every key)",
          (r"walks \d+ grid steps? \(a grid of",)),
    Cause("wasted work", "copies or compute for blocks the result never needs",
          (r"so the copy is wasted", r"a block that the mask empties is still computed")),
    Cause("illegal block", "a block or operation the TPU's compiler refuses",
          (r"would not compile for a (?:\w+ )?TPU",)),
    # Answers that are not arrays from a kernel
    Cause("wrong answer",
          "a function that answers a question (a block rule, a schedule, a simulation, a search) "
          "answers another",
          (r"differs (?:first at|in \d+ of)", r"; expected ", r"says the block is illegal",
           r"returned None \(legal\)", r"has \d+ transfers, the pipeline runs", r"hbm_bytes is ",
           r"offers \{", r"the fastest record is", r"never timed \{", r"from a cache that times \{")),
)

NAMES = tuple(cause.name for cause in CAUSES)
_PATTERNS = [(cause, re.compile(pattern)) for cause in CAUSES for pattern in cause.said]


def first_suspect(report: str) -> str | None:
    """The cause a report names first (its words earliest in the text), or None. A fallback
    cause ("wrong values", whose words every value failure's first line holds) is the report's
    suspect only where it names no other."""
    found = [(cause.fallback, match.start(), index, cause.name) for index, (cause, pattern) in enumerate(_PATTERNS)
             for match in [pattern.search(report)] if match]
    return min(found)[3] if found else None
