"""The gates as a gate test reads them: a gate's criteria and thresholds, and its ops' names.

A face over `gates/criteria.py`, and `own_kernel` / `own_kernel_gradient` (gates/own_work.py): the
gate-sized programs a gate's correctness test hands to `gate_run.verify(..., work=[...])`, which
must be the graded tree's own kernels doing the op. The gate_run fixture measures and records.
`recorded_link`: the upstream link a learner recorded for a gate (`tpucourse records link`).
`flash_ceiling` / `splash_ceiling`: the spaces gates 03 and 05 search their ceilings over (gates/ceilings.py).
"""

from __future__ import annotations

from .gates.criteria import CAPSTONE_TIMED_TARGETS, GATE0_BAND, Criterion, Gate, Slot, attention_op, capstone_op, gate
from .gates.own_work import of_call as own_kernel
from .gates.own_work import of_gradient as own_kernel_gradient
from .gates.records import recorded_link

__all__ = ["CAPSTONE_TIMED_TARGETS", "GATE0_BAND", "Criterion", "Gate", "Slot", "attention_op", "capstone_op",
           "flash_ceiling", "gate", "own_kernel", "own_kernel_gradient", "recorded_link", "splash_ceiling"]


def flash_ceiling(step, **space):
    """Gate 03's ceiling: JAX's flash attention's tuning space (gates/ceilings.py `flash_space`)."""
    from .gates import ceilings

    return ceilings.flash_space(step, **space)


def splash_ceiling(step, **space):
    """Gate 05's ceiling where it is splash attention: its tuning space (gates/ceilings.py `splash_space`)."""
    from .gates import ceilings

    return ceilings.splash_space(step, **space)
