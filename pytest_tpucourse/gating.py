"""The gates as a gate test reads them: a gate's criteria and thresholds, and its ops' names.

A face over `gates/criteria.py`, and `own_kernel` / `own_kernel_gradient` (gates/own_work.py): the
gate-sized programs a gate's correctness test hands to `gate_run.verify(..., work=[...])`, which
must be the graded tree's own kernels doing the op. The gate_run fixture measures and records.
`recorded_link`: the upstream link a learner recorded for a gate (`tpucourse records link`).
"""

from __future__ import annotations

from .gates.criteria import GATE0_BAND, Criterion, Gate, Slot, attention_op, gate
from .gates.own_work import of_call as own_kernel
from .gates.own_work import of_gradient as own_kernel_gradient
from .gates.records import recorded_link

__all__ = ["GATE0_BAND", "Criterion", "Gate", "Slot", "attention_op", "gate", "own_kernel", "own_kernel_gradient",
           "recorded_link"]
