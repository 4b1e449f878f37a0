"""The six gates: criteria in the course's words, the numbers that judge them, and their status.

Gates live here as data rather than in course.toml: course.toml says which stage
chapter closes which gate (tests/test_gates.py checks the two agree), while a
criterion carries thresholds that code applies to measured ratios, and keeping
the number next to its reason is the point.

The numbers:
  DECISIVELY = 1.25: "beats XLA decisively" means at least 1.25x faster than the XLA
    floor (time ratio <= 0.8). Run-to-run spread of a steady TPU benchmark is a few
    percent; a quarter is far outside it, and about the smallest win that pays for
    maintaining a hand-written kernel next to the compiler's.
  STRIKING_DISTANCE = 1.15: "within striking distance" of a reference means at most
    15% slower than it (ratio <= 1.15): close enough that block sizes and schedule
    tuning, not a new algorithm, close the rest.
  GATE0_BAND = (0.95, 1.5): gate 0 ("the roofline predicts this chip") wants XLA's own
    matmul, skinny matmul and add measured between 0.95x and 1.5x of their roofline
    floors. Below 0.95 the chip's figures are wrong (nothing beats the floor; 5% covers
    the published figures' rounding and timer resolution); above 1.5 the run is timing
    something besides the op (dispatch, transfer, a cold cache) or XLA is reaching less
    than two thirds of the bound resource, which the roofline cannot then predict.

A criterion's status comes only from records (records.py; report.py reads a run's statuses):
  pass              every row that speaks for it was measured on the chip and passed
  pass (off-chip)   a correctness criterion verified under interpret mode; not a gate pass
  fail              some row that speaks for it failed
  awaiting hardware nothing measured yet (predictions only, or no rows)
  not runnable here the kernel cannot run on this chip (a TPU Pallas kernel on a GPU)
Reference rows (a floor or ceiling timed next to a kernel) judge the kernel's row;
they never decide a criterion themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

DECISIVELY = 1.25
STRIKING_DISTANCE = 1.15
GATE0_BAND = (0.95, 1.5)

PASS, PASS_OFF_CHIP, FAIL, AWAITING = "pass", "pass (off-chip)", "fail", "awaiting hardware"
NOT_RUNNABLE = "not runnable here"


@dataclass(frozen=True)
class Criterion:
    id: str
    text: str  # the course's words
    kind: str  # "correctness", "speed" or "public"
    ratio_of: str | None = None  # speed: what a time is divided by: "roofline", "floor", "ceiling",
    #                                "compute-alone" (gate 04: the kernel's own compute, no communication)
    ratio_range: tuple[float, float] | None = None  # speed: the passing ratios, inclusive

    def judge(self, ratio: float) -> str:
        """pass or fail for a measured time ratio (speed criteria only)."""
        if self.ratio_range is None:
            raise ValueError(f"criterion {self.id} is not judged by a time ratio")
        low, high = self.ratio_range
        return PASS if low <= ratio <= high else FAIL


@dataclass(frozen=True)
class Gate:
    number: int
    chapter: str
    title: str
    criteria: tuple[Criterion, ...]

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(f"gate {self.number:02d} has no criterion {criterion_id!r}; "
                       f"it has {', '.join(c.id for c in self.criteria)}")


_CORRECT = Criterion("correct", "Correct under the differential suite", "correctness")


def _beats_xla_decisively(what: str) -> Criterion:
    return Criterion("beats-xla", f"{what} beats XLA decisively at target shapes", "speed",
                     ratio_of="floor", ratio_range=(0.0, 1 / DECISIVELY))


def _striking_distance_of_ceiling(what: str) -> Criterion:
    return Criterion("near-ceiling", f"{what} within striking distance of the hand-tuned ceiling",
                     "speed", ratio_of="ceiling", ratio_range=(0.0, STRIKING_DISTANCE))


GATES: tuple[Gate, ...] = (
    Gate(0, "ch10", "The machine", (
        Criterion("roofline-predicts", "The roofline predicts this chip: XLA's matmul, skinny "
                  "matmul and add measured within the band of their floors", "speed",
                  ratio_of="roofline", ratio_range=GATE0_BAND),
    )),
    Gate(1, "ch11", "Pallas fundamentals", (
        _CORRECT,
        Criterion("matmul-near-xla", "Matmul within striking distance of XLA at 4096³", "speed",
                  ratio_of="floor", ratio_range=(0.0, STRIKING_DISTANCE)),
        Criterion("fused-beats-unfused", "The fused kernel beats XLA's unfused sequence", "speed",
                  ratio_of="floor", ratio_range=(0.0, 1.0)),
    )),
    Gate(2, "ch12", "The IR stack", (
        # The course states no criterion for gate 02; this one is the project's.
        Criterion("ir-mapped", "The x-ray and the narration are correct on the chip's own "
                  "compilation", "correctness"),
    )),
    Gate(3, "ch13", "The priesthood kernels", (
        _CORRECT,
        _beats_xla_decisively("Flash attention"),
        _striking_distance_of_ceiling("Flash attention"),
    )),
    Gate(4, "ch14", "Distributed Pallas", (
        _CORRECT,
        Criterion("communication-hidden", "Communication hidden behind compute: the collective "
                  "matmul within striking distance of its compute alone", "speed",
                  ratio_of="compute-alone", ratio_range=(0.0, STRIKING_DISTANCE)),
    )),
    Gate(5, "ch15", "Capstone: shipped upstream", (
        _CORRECT,
        _beats_xla_decisively("The kernel"),
        _striking_distance_of_ceiling("The kernel"),
        Criterion("upstream", "The upstream submission exists in public", "public"),
    )),
)


GATE_NUMBERS = range(len(GATES))  # the one place the gate range is spelled: 0-5


def gate_range() -> str:
    return f"{GATE_NUMBERS[0]}-{GATE_NUMBERS[-1]}"


def is_gate_number(number) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and number in GATE_NUMBERS


def gate(number: int) -> Gate:
    if not isinstance(number, int) or number not in GATE_NUMBERS:
        raise ValueError(f"no gate {number!r}: gates are {gate_range()}")
    return GATES[number]


def criterion_status(criterion: Criterion, rows: list) -> str:
    """Status of one criterion from the rows that speak for it (records.current)."""
    rows = [r for r in rows if r.verdict != "reference"]
    if any(r.verdict == "fail" for r in rows):
        return FAIL
    if any(r.verdict == "not-runnable" for r in rows):
        return NOT_RUNNABLE
    measured = [r for r in rows if r.method == "measured"]
    if measured and len(measured) == len(rows):
        return PASS
    if criterion.kind == "correctness" and rows and all(
        r.method in ("off-chip-verified", "measured") for r in rows
    ):
        return PASS_OFF_CHIP
    return AWAITING
