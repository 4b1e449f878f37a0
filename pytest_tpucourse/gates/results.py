"""What a gate call returns (`GateResult`) and the gate test's outcome made of its results."""

from __future__ import annotations

from dataclasses import dataclass

from . import criteria as gate_criteria
from . import records as rec

NOTHING_TIMED = "nothing timed"  # a result status: interpret mode on an accelerator


@dataclass(frozen=True)
class GateResult:
    """What one measurement or verification showed: a status (criteria.py's words), why, its rows."""

    status: str
    message: str
    rows: tuple[rec.Record, ...] = ()
    timed: bool = False  # the status is a verdict judged on timings (not a failed check)


def test_outcome(results) -> tuple[str, str] | None:
    """("failed" | "skipped", message) for a gate test's results, or None when it passed
    (a rehearsal's: rehearsal.test_outcome)."""
    failed = [r.message for r in results if r.status == gate_criteria.FAIL]
    if failed:
        return "failed", "\n".join(failed)
    waiting = [r.message for r in results if r.status in (gate_criteria.AWAITING, gate_criteria.NOT_RUNNABLE,
                                                           NOTHING_TIMED)]
    if waiting:
        return "skipped", "; ".join(dict.fromkeys(waiting))
    return None


def interval_text(interval) -> str:
    return "none: too few rounds" if interval is None else f"[{interval[0]:.3g}, {interval[1]:.3g}]"

