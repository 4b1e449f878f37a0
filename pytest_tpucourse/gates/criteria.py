"""The gate table: each gate's number, chapter, title, kernels, whether it times the learner's own
kernel, and its criteria; the numbers that judge them, the measurements each needs, their status.

`GATES` is the one place these facts are written. Everything else reads it: the gate range
(`gate_range`, the gate marker, records), the own-work check (gates/run.py), the counts in the
progress summary, the site and the project's tests, and docs/records-schema.json's gate bounds
(generated from it by `tpucourse new-chapter`, checked by tests/test_records.py). Gates live
here as data rather than in course.toml: course.toml says which stage chapter closes which gate
(tests/test_gates.py checks the two agree), while a criterion carries thresholds that code
applies to measured ratios, and keeping the number next to its reason is the point.

Whose words: only gate 05's criteria are the course's own (the capstone page); the
criteria of gates 00-04 are the project's wording of each stage's promise (`words`).

The numbers:
  DECISIVELY = 1.25: "beats XLA decisively" means at least 1.25x faster than the XLA
    floor (time ratio <= 0.8). Run-to-run spread of a steady TPU benchmark is a few
    percent; a quarter is far outside it, and about the smallest win that pays for
    maintaining a hand-written kernel next to the compiler's.
  STRIKING_DISTANCE = 1.15: "within striking distance" of a reference means at most
    15% slower than it (ratio <= 1.15): close enough that block sizes and schedule
    tuning, not a new algorithm, close the rest.
  ALONE_NEAR_FLOOR = 1.5: gate 04 judges overlap against the kernel's own compute alone, which
    must itself run within 1.5x of its roofline floor (the band gate 0 holds XLA to). A slow
    compute alone makes any ratio to it small: at 3x its floor, a kernel that gathers first and
    multiplies after, its communication wholly exposed, scores inside STRIKING_DISTANCE.
  GATE0_BAND = (0.95, 1.5): gate 0 ("the roofline predicts this chip") wants XLA's own
    matmul, skinny matmul and add measured between 0.95x and 1.5x of their roofline
    floors. Below 0.95 the chip's figures are wrong (nothing beats the floor; 5% covers
    the published figures' rounding and timer resolution); above 1.5 the run is timing
    something besides the op (dispatch, transfer, a cold cache) or XLA is reaching less
    than two thirds of the bound resource, which the roofline cannot then predict.
A speed criterion is judged on the 95% confidence interval of the ratio, not on its
median alone: it passes only when the whole interval lies inside the passing range, so
a tie never "beats" anything (judge.py).

Slots: a criterion names every measurement it needs (op, operand shapes, dtype); it
passes only when each slot has a passing measured row. Gate 05's slots are the graded
tree's own: chapter 15's capstone.toml declares its target shapes and corner cases, and
`declared(gates, tree_root)` reads them into the table (`capstone_slots`). A tree whose
manifest does not declare them leaves the slots undeclared, and gate 05 cannot pass.

A criterion's status comes only from records (judge.py re-judges every row it reads):
  pass              every slot's latest measurement was made on the chip and passed
  pass (older code) it passed, but a graded module changed since (the rows carry hashes)
  off-chip verified   a correctness criterion verified under interpret mode, for the graded
                    modules as they are now (an edit since makes it awaiting); not a gate pass
  linked (self-reported)  a public criterion: a link recorded by `tpucourse records link`
  not applicable    a public criterion judged for the course's own reference solutions (`--solutions`,
                    bench/README.md): a learner's act, which no run of the course's code can show;
                    a learner's tree always needs its link
  fail              some slot's latest measurement failed
  not runnable here the kernel cannot run on this chip (a TPU Pallas kernel on a GPU)
  awaiting hardware nothing measured yet (predictions only, or no rows)
  no gate test yet  the gate's chapter has no gate test, so nothing can write its rows
Reference rows (a floor or ceiling timed next to a kernel) judge the kernel's row;
they never decide a criterion themselves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DECISIVELY = 1.25
STRIKING_DISTANCE = 1.15
ALONE_NEAR_FLOOR = 1.5
GATE0_BAND = (0.95, 1.5)

PASS, PASS_OLDER_CODE, PASS_OFF_CHIP = "pass", "pass (older code)", "off-chip verified"
SELF_REPORTED, FAIL, AWAITING = "linked (self-reported)", "fail", "awaiting hardware"
NOT_RUNNABLE, NO_GATE_TEST = "not runnable here", "no gate test yet"
NOT_APPLICABLE = "not applicable (the course's reference solutions: the upstream submission is each learner's own)"
SATISFIED = (PASS, SELF_REPORTED, NOT_APPLICABLE)  # what a criterion must show for its gate to count as passed


@dataclass(frozen=True)
class Slot:
    """One measurement a criterion needs: an op on operands of these shapes and dtype."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str

    @classmethod
    def of(cls, op: str, shapes, dtype: str) -> Slot:
        return cls(op, tuple(tuple(int(d) for d in s) for s in shapes), str(dtype))

    def describe(self) -> str:
        return f"{self.op} {' · '.join('×'.join(map(str, s)) for s in self.shapes)} {self.dtype}"


@dataclass(frozen=True)
class Criterion:
    id: str
    text: str
    kind: str  # "correctness", "speed" or "public"
    ratio_of: str | None = None  # speed: what a time is divided by: "roofline", "floor", "ceiling",
    #                                "compute-alone" (gate 04: the kernel's own compute, no communication)
    ratio_range: tuple[float, float] | None = None  # speed: the passing ratios, inclusive
    slots: tuple[Slot, ...] | None = None  # None: not declared yet (the criterion cannot pass)
    # compute-alone: the range of its own time over its roofline floor it must also lie in (gate 04)
    alone_range: tuple[float, float] | None = None
    applies: bool = True  # False: a public criterion judged for the course's reference solutions (declared)

    @property
    def judged_implementation(self) -> str:
        """The implementation whose rows carry this criterion's verdict."""
        return "floor" if self.ratio_of == "roofline" else "kernel"


@dataclass(frozen=True)
class Gate:
    number: int
    chapter: str  # the stage chapter that closes it (course.toml's `gate`)
    title: str  # the chapter's title
    criteria: tuple[Criterion, ...]
    words: str  # "course" (the course states the criteria) or "project" (the project's wording)
    # The learner's functions whose Pallas kernels the gate runs, as "module.function" of its chapter.
    kernels: tuple[str, ...] = ()
    # Whether the gate judges and times the learner's own kernel: its correctness criterion and every
    # timed kernel must be the graded tree's own Pallas kernels doing the op's work (own_work.py).
    times_own_kernel: bool = False

    def __post_init__(self):
        if self.times_own_kernel and not self.kernels:
            raise ValueError(f"gate {self.number:02d} times the learner's own kernel: name its kernels")

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.criteria:
            if c.id == criterion_id:
                return c
        raise KeyError(f"gate {self.number:02d} has no criterion {criterion_id!r}; "
                       f"it has {', '.join(c.id for c in self.criteria)}")

    @property
    def label(self) -> str:
        return f"gate {self.number:02d}"

    def test_file(self) -> str:
        """Where the gate's tests live, relative to the course root."""
        return f"exercises/{self.chapter}/test_gate{self.number:02d}.py"


BF16 = "bfloat16"
N = 4096
MATMUL_4096 = ((N, N), (N, N))
ATTENTION_TARGETS = ((2, 16, 4096), (1, 8, 8192))  # (batch, heads, sequence); head_dim 128
ATTENTION_HEAD_DIM = 128


def attention_op(causal: bool, backward: bool) -> str:
    """The op name gate 03's speed rows carry: attention[-causal]-fwd or -fwd-bwd."""
    return f"attention{'-causal' if causal else ''}-{'fwd-bwd' if backward else 'fwd'}"


def _attention_speed_slots() -> tuple[Slot, ...]:
    return tuple(Slot.of(attention_op(causal, backward), [(b, h, s, ATTENTION_HEAD_DIM)] * 3, BF16)
                 for backward in (False, True) for b, h, s in ATTENTION_TARGETS for causal in (False, True))


def _correct(*slots: Slot) -> Criterion:
    return Criterion("correct", "Correct under the differential suite", "correctness", slots=slots or None)


def _beats_xla_decisively(what: str, slots) -> Criterion:
    return Criterion("beats-xla", f"{what} beats XLA decisively at target shapes", "speed",
                     ratio_of="floor", ratio_range=(0.0, 1 / DECISIVELY), slots=slots)


GATES: tuple[Gate, ...] = (
    Gate(0, "ch10", "The machine", (
        Criterion("roofline-predicts", "The roofline predicts this chip: XLA's matmul, skinny "
                  "matmul and add measured within the band of their floors", "speed",
                  ratio_of="roofline", ratio_range=GATE0_BAND,
                  slots=(Slot.of("matmul", MATMUL_4096, BF16), Slot.of("matmul", ((8, N), (N, N)), BF16),
                         Slot.of("add", MATMUL_4096, BF16))),
    ), words="project"),  # XLA's own ops: nothing of the learner's runs
    Gate(1, "ch11", "Pallas fundamentals", (
        _correct(Slot.of("matmul+fused", ((512, 1024), (1024, 512), (512,)), BF16)),
        Criterion("matmul-near-xla", "Matmul within striking distance of XLA at 4096³", "speed",
                  ratio_of="floor", ratio_range=(0.0, STRIKING_DISTANCE),
                  slots=(Slot.of("matmul", MATMUL_4096, BF16),)),
        Criterion("fused-beats-unfused", "The fused matmul + bias + GELU kernel beats XLA's unfused "
                  "sequence (three separately compiled calls)", "speed",
                  ratio_of="floor", ratio_range=(0.0, 1.0),
                  slots=(Slot.of("matmul_bias_gelu", ((N, N), (N, N), (N,)), BF16),)),
    ), words="project", kernels=("matmul.matmul", "fused_matmul.matmul_bias_act"), times_own_kernel=True),
    Gate(2, "ch12", "The IR stack", (
        Criterion("ir-mapped", "The x-ray and the narration are correct on the chip's own "
                  "compilation", "correctness",
                  slots=(Slot.of("mlp_block", ((256, 512), (512, 256), (1, 256)), BF16),)),
    ), words="project"),  # the learner's IR readers on the course's program: no kernel of theirs
    Gate(3, "ch13", "The priesthood kernels", (
        _correct(*(Slot.of(f"flash_attention{'-causal' if causal else ''}", [(1, 2, 512, 128)] * 3, BF16)
                   for causal in (False, True))),
        _beats_xla_decisively("Flash attention", _attention_speed_slots()),
        Criterion("near-ceiling", "Flash attention within striking distance of the tuned ceiling: JAX's "
                  "Pallas flash attention at the fastest configuration of its space searched on the chip", "speed",
                  ratio_of="ceiling", ratio_range=(0.0, STRIKING_DISTANCE), slots=_attention_speed_slots()),
    ), words="project", kernels=("forward.flash_forward", "backward.flash_attention"), times_own_kernel=True),
    Gate(4, "ch14", "Distributed Pallas", (
        _correct(Slot.of("collectives", ((64, 256), (4 * 4 * 16, 256), (256, 512)), BF16)),
        Criterion("communication-hidden", "Communication hidden behind compute: the collective "
                  "matmul within striking distance of its compute alone, itself within 1.5x of its "
                  "roofline floor", "speed",
                  ratio_of="compute-alone", ratio_range=(0.0, STRIKING_DISTANCE),
                  alone_range=(0.0, ALONE_NEAR_FLOOR),
                  slots=(Slot.of("all-gather-matmul", ((1024, 512), (512, 4 * 16384)), BF16),)),
    ), words="project", kernels=("permute.ring_permute", "all_gather.all_gather", "reduce_scatter.reduce_scatter",
                                 "collective_matmul.all_gather_matmul", "timeline.pair_exchange"),
        times_own_kernel=True),
    Gate(5, "ch15", "Capstone: shipped upstream", (
        # The course's own words (the capstone page); its second line holds two baselines, so
        # it is judged as two criteria. The slots are the learner's target shapes (chapter 15).
        _correct(),
        _beats_xla_decisively("The kernel", None),
        Criterion("near-ceiling", "The kernel within striking distance of the hand-tuned ceiling",
                  "speed", ratio_of="ceiling", ratio_range=(0.0, STRIKING_DISTANCE)),
        Criterion("upstream", "The upstream submission exists in public", "public"),
    ), words="course", kernels=("forward.window_forward", "backward.window_attention"), times_own_kernel=True),
)


CAPSTONE_GATE = 5
CAPSTONE_MANIFEST = "capstone.toml"  # in the capstone chapter of the graded tree
CAPSTONE_TIMED_TARGETS = 2  # gate 05 times the manifest's first two target shapes


def capstone_op(backward: bool, options: dict) -> str:
    """The op gate 05's speed rows carry: capstone-fwd-window1024, capstone-fwd-bwd-window2048."""
    return f"capstone-{'fwd-bwd' if backward else 'fwd'}-" + "-".join(f"{k}{v}" for k, v in dict(options).items())


def capstone_slots(manifest: dict) -> dict[str, tuple[Slot, ...]] | None:
    """{criterion id: slots} of gate 05 from a capstone manifest: the correctness slot of its
    enumerated cases, the speed slots of its first two targets, forward and forward + backward.
    None when the manifest does not declare them readably (its targets or cases missing or malformed)."""
    from ..instruments import capstone
    from ..core.outcomes import WrongResult

    try:
        cases = capstone.cases(manifest)
        targets = list(manifest["targets"])[:CAPSTONE_TIMED_TARGETS]
        speed = []
        for backward in (False, True):
            for t in targets:
                shape = (t["batch"], t["heads"], t["seq"], t["head_dim"])
                speed.append(Slot.of(capstone_op(backward, t["options"]), [shape] * 3, t["dtype"]))
    except (WrongResult, KeyError, TypeError, ValueError):
        return None
    if not targets:
        return None
    correct = Slot.of("capstone", [s for c in cases for s in c.shapes()], "/".join(sorted({c.dtype for c in cases})))
    return {"correct": (correct,), "beats-xla": tuple(speed), "near-ceiling": tuple(speed)}


def declared(gates: tuple[Gate, ...], tree_root, *, reference: bool = False) -> tuple[Gate, ...]:
    """The gates with gate 05's slots declared by the graded tree at `tree_root` (its capstone.toml,
    read as data: no graded code runs); unchanged where the manifest declares none.

    reference: the tree is the course's own reference solutions, whose public criteria (gate 05's
    upstream submission, a learner's own act) do not apply: the course can run its kernels on a chip
    but cannot earn a learner's review, and does not pretend to."""
    if reference:
        gates = tuple(dataclasses.replace(g, criteria=tuple(dataclasses.replace(c, applies=False)
                                                            if c.kind == "public" else c for c in g.criteria))
                      for g in gates)
    import tomllib
    from pathlib import Path

    capstone_gate = gates[CAPSTONE_GATE]
    try:
        with open(Path(tree_root) / capstone_gate.chapter / CAPSTONE_MANIFEST, "rb") as handle:
            slots = capstone_slots(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError):
        slots = None
    if slots is None:
        return gates
    criteria_ = tuple(dataclasses.replace(c, slots=slots[c.id]) if c.id in slots else c
                      for c in capstone_gate.criteria)
    return gates[:CAPSTONE_GATE] + (dataclasses.replace(capstone_gate, criteria=criteria_),) + gates[CAPSTONE_GATE + 1:]


GATE_NUMBERS = range(len(GATES))  # the gate range, counted from the table: 0 to the last gate


def gate_range() -> str:
    return f"{GATE_NUMBERS[0]}-{GATE_NUMBERS[-1]}"


def is_gate_number(number) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and number in GATE_NUMBERS


def gate(number: int) -> Gate:
    if not is_gate_number(number):
        raise ValueError(f"no gate {number!r}: gates are {gate_range()}")
    return GATES[number]
