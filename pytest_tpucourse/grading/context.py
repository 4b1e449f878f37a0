"""What every graded call of one run shares: its deadline, VMEM budget, lowering chip and caches.

The session builds one GradingContext from the options and activates it for the run; the
`impl` fixture hands it to the functions it grades, and a function wrapped elsewhere
(`checks.graded`) finds the active one. Outside a pytest run (a benchmark script) the
defaults hold: a 60 s deadline, no VMEM check, lowering for the default chip. Activations
nest, so a pytest run started inside another (pytester in-process) restores the outer
run's context when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..chips import DEFAULT_CHIP
from .compiled import CompiledPrograms
from .deadline import Deadline
from .vmem import VmemBudget


@dataclass(eq=False)
class GradingContext:
    deadline: Deadline = field(default_factory=Deadline)
    vmem: VmemBudget = field(default_factory=VmemBudget)
    lowering_chip: str = DEFAULT_CHIP  # the TPU that the Mosaic lowering check targets off a TPU
    programs: CompiledPrograms = field(default_factory=CompiledPrograms)
    # Calls (call_keys.call_key) already seen to run a pallas_call: a hypothesis test calls one
    # function on a few shapes many times, and the trace costs about as much as one
    # interpret-mode call of a small kernel.
    kernel_calls: set = field(default_factory=set)
    # The latest call of each graded function (by display), for the reproduction line of a
    # check that fails (reproduction.py).
    calls: dict = field(default_factory=dict)
    # The sha256 of the bytes each graded module was imported from (its resolved path as text):
    # what the state file and gate rows record, whatever the file holds later.
    imported: dict = field(default_factory=dict)
    # The bytes themselves ({resolved path: bytes}): what the graded code was compiled from
    # (solution_code.py tells a module's own code from code executed into it).
    imported_sources: dict = field(default_factory=dict)
    # The shipped solution files the learner's tree opened (solution_reads.SolutionReads), in a
    # run that grades exercises/; None otherwise.
    solution_reads: object = None


_active: list[GradingContext] = []
_outside_a_run = GradingContext()


def activate(context: GradingContext) -> None:
    _active.append(context)


def deactivate(context: GradingContext) -> None:
    if context in _active:
        _active.remove(context)


def runs_in_progress() -> int:
    """How many runs are active in this process (2: a pytester run inside another)."""
    return len(_active)


def active() -> GradingContext:
    """The context of the innermost run in progress, or the defaults outside any."""
    return _active[-1] if _active else _outside_a_run
