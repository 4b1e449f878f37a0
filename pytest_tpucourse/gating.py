"""The gates as a gate test reads them: a gate's criteria and thresholds, and its ops' names.

A face over `gates/criteria.py`; the gate_run fixture does the measuring and recording.
"""

from __future__ import annotations

from .gates.criteria import GATE0_BAND, Criterion, Gate, Slot, attention_op, gate

__all__ = ["GATE0_BAND", "Criterion", "Gate", "Slot", "attention_op", "gate"]
