"""The gate test's one object for measuring and recording (`gate_run`), and what a run's gates share.

Measure, judge and record are separate: the harness (timer.py) measures, `judge.py` turns
samples into verdicts, `records.py` writes rows. A GateRun ties them for one gate test and
returns a `GateResult` for each call; it never skips or fails the test itself. The plugin's
report hook turns the results into the test's outcome: "awaiting hardware" and "not runnable
here" into a skip, a failed criterion into a failure (`test_outcome`).

GateRun is the API a gate test calls; this module holds what every call shares (what the run
is, its rows, predictions and correctness); each way to measure lives in a module of its own:
  measure_floor  gate 0: XLA's op against its roofline floor (floor.py).
  measure_trio   a kernel between the XLA floor and the public ceiling, timed in the same
                 rounds; the kernel row is judged by the gate's speed criteria from its
                 round-by-round ratios, the floor and ceiling rows are references (trio.py). The
                 ceiling may be a sweep of candidates (block sizes): the fastest on the chip is
                 used, or the choice a sweep kept from an earlier run made (sweeps.py), timed
                 again here (ceiling_sweep.py).
  measure_against_compute_alone
                 gate 4: a distributed kernel on several chips against its own compute with
                 no communication; fewer chips than it needs is "not runnable", never a pass
                 (its compute alone is still timed on one chip; multi_chip.py, placement.py).
Before anything is timed, every timed implementation but the floor is checked against its
reference on every input set it will be timed on, and again after timing on inputs of a
fresh seed (sampling.py): an implementation whose output is wrong (zeros at the timed size, a
cached answer) gets a fail row and never a time.

A gate the table marks `times_own_kernel` (criteria.py; gates 01, 03, 04 and 05) judges the
learner's own kernel (own_work.py): its correctness criterion and, before anything is timed,
every timed kernel are checked on the gate-sized program; a kernel that is not the graded
tree's, or leaves the op's work to XLA, gets a fail row saying what was found.

Nothing is timed off an accelerator, or when the run asked for an interpreter
(`--interpret tpu|fast`): the roofline floor is recorded as a prediction instead. A
rehearsal (rehearsal.py) runs the whole path anyway, on a stand-in clock, as if on the chip.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ..core.paths import shown_in_text
from ..roofline import Cost, predict
from . import ceiling_sweep, chip_compile, floor, multi_chip, own_work, trio
from . import criteria as gate_criteria
from . import records as rec
from .context import GateContext, gate_context  # noqa: F401  (imported from here by the plugin and tests)
from .provenance import Provenance
from .results import NOTHING_TIMED, GateResult, test_outcome  # noqa: F401
from .sampling import INPUT_SETS, timed_fields  # noqa: F401
from .sampling import wrong_output as _wrong_output  # noqa: F401  (the name graded code is watched for replacing)


class GateRun:
    """Measures, judges and records the rows of one gate test."""

    def __init__(self, context: GateContext, *, gate: int, chapter: str, test_id: str, provenance: Provenance,
                 harness=None, store=None, marker_cost: Cost | None = None, live_device=None,
                 tree_root: Path | None = None, unconfirmed: tuple[str, ...] = ()):
        self.context = context  # what every gate test of the run shares: chip, device, where rows go
        self.gate = context.gates[gate]  # from the thresholds captured when the run started
        self.chapter = chapter
        self.test_id = test_id
        self.provenance = provenance
        self.harness = harness
        self.store = store
        self.marker_cost = marker_cost  # from the test's @pytest.mark.roofline(flops=, bytes=)
        self._live_device = live_device  # reads the device again when a measured row is written
        self.tree_root = tree_root  # the graded tree: a gate's kernel must be defined in it
        self.results: list[GateResult] = []
        self._scaled: list[tuple] = []  # (timed, CPU) shapes a rehearsal on a CPU built its inputs at
        self._off_chip_because: str | None = None  # inside devices(): checked off the chip, and why
        # The learner's gate kernels the trusted check has not confirmed for the bytes this run
        # imports, and why: on the chip they are not timed as the learner's (docs/earned.md).
        self.unconfirmed = tuple(unconfirmed)

    # The run's shared facts, read from its GateContext.
    chip = property(lambda self: self.context.chip)
    device = property(lambda self: self.context.device)
    records_path = property(lambda self: Path(self.context.records_path))
    root = property(lambda self: self.context.root)
    kernels_native = property(lambda self: self.context.kernels_native)  # Pallas kernels run compiled here
    interpret_requested = property(lambda self: self.context.interpret_requested)  # nothing is timed
    rehearsal = property(lambda self: self.context.rehearsal)  # on the chip's path, on a stand-in clock

    # ------------------------------------------------------------ what the run is

    @property
    def on_accelerator(self) -> bool:
        """On the chip, or rehearsing as if on it."""
        return self.device.is_accelerator or self.rehearsal is not None

    @property
    def platform(self) -> str:
        return self.chip.kind if self.rehearsal is not None else self.device.platform

    def shapes(self, timed, *, cpu):
        """The shapes a test builds its timed inputs at: `timed` (the slot's), or `cpu`, smaller,
        when a rehearsal runs on a CPU, which could not run the timed ones (said in the output)."""
        if self.rehearsal is None or self.device.is_accelerator:
            return timed
        if _dims(timed) != _dims(cpu):
            self.rehearsal.note_scaled(self.test_id, f"{_dims(timed)} -> {_dims(cpu)}")
            self._scaled.append((timed, cpu))
        return cpu

    def _refused_at_gate_size(self, kernel, args) -> str | None:
        """A rehearsal on a CPU: the timed kernel compiled for the chip at the gate's own shapes and
        blocks (chip_compile.py); the compiler's refusal, or None. Elsewhere the run compiles it."""
        if self.rehearsal is None or self.device.is_accelerator:
            return None
        compiled = chip_compile.at_gate_size(kernel, args, self._scaled, self.chip)
        if compiled.note:
            self.rehearsal.note_compiled(self.test_id, compiled.note)
        return compiled.refused

    def _why_nothing_is_timed(self, op: str, dtype: str, what: str) -> GateResult | None:
        if self._off_chip_because is not None:  # inside devices(): simulated devices, TPU interpret mode
            return GateResult(NOTHING_TIMED, f"{op} {dtype}: nothing is timed where the chips are simulated "
                                             f"({self._off_chip_because})")
        if not self.on_accelerator:
            return GateResult(gate_criteria.AWAITING,
                              f"awaiting hardware: {op} {dtype} {what} predicted for {self.chip.name}; "
                              f"nothing is timed off-chip")
        if self.interpret_requested and self.rehearsal is None:
            return GateResult(NOTHING_TIMED, f"interpret mode: nothing is timed ({op} {dtype} on "
                                             f"{self.device.device_kind}; run without --interpret to time it)")
        return None

    def _finish(self, result: GateResult) -> GateResult:
        self.results.append(result)
        return result

    def _not_own_work(self, works) -> list[str]:
        """What shows these programs are not the graded tree's own kernels doing the op."""
        if not self.gate.times_own_kernel or self.tree_root is None:
            return []
        found = own_work.find(works, self.tree_root, self.root)
        if self.device.is_accelerator and self.rehearsal is None:  # a measured row: its code was judged outside
            found += list(self.unconfirmed)
        return found

    def _timed_kernel_work(self, fn, args, cost: Cost, what: str = "the timed kernel") -> own_work.Work:
        return own_work.of_call(fn, args, flops=cost.flops, what=what)

    # ------------------------------------------------------------ rows

    def _cost(self, cost: Cost | None) -> Cost:
        if cost is not None and self.marker_cost is not None and cost != self.marker_cost:
            raise ValueError(f"{self.test_id}: the call's cost ({cost.flops:g} FLOPs, {cost.bytes:g} bytes) "
                             f"disagrees with its roofline marker ({self.marker_cost.flops:g} FLOPs, "
                             f"{self.marker_cost.bytes:g} bytes): give one")
        cost = cost if cost is not None else self.marker_cost
        if cost is None:
            raise ValueError(f"{self.test_id}: no cost for the roofline floor: pass cost= or mark the "
                             f"test @pytest.mark.roofline(flops=..., bytes=...)")
        return cost

    def _record(self, **fields) -> rec.Record:
        p = self.provenance
        if fields.get("method") == "measured":
            self._check_live_device()
        notes = fields.pop("notes", "")
        if p.commit_stated:
            notes = f"{p.commit_note()}; {notes}"
        if self.rehearsal is not None:
            scaled = self.rehearsal.scaled.get(self.test_id)
            notes = "rehearsal on a stand-in clock" + (f", at {'; '.join(scaled)}" if scaled else "") + "; " + notes
        row = rec.Record(rehearsal=self.rehearsal is not None,gate=self.gate.number, chapter=self.chapter, test_id=self.test_id, tree=p.tree,
                         chip=self.chip.name, platform=p.platform, device_kind=p.device_kind, jax=p.jax,
                         jaxlib=p.jaxlib, libtpu=p.libtpu, git_commit=p.git_commit, git_dirty=p.git_dirty,
                         modules=p.modules, notes=shown_in_text(notes, self.root)[:1000] if self.root else notes,
                         **fields)
        rec.append(self.records_path, row)
        return row

    def _check_live_device(self) -> None:
        """A measured row needs the device JAX reports now to be the one the run started on."""
        if self._live_device is None:
            return
        now = self._live_device()
        if (now.platform, now.device_kind) != (self.device.platform, self.device.device_kind):
            raise rec.HonestyError(
                f"{self.test_id}: this process runs on {now.platform} ({now.device_kind}), but the gate "
                f"run says {self.device.platform} ({self.device.device_kind}): something rewrote the "
                f"run's device after it started; nothing is recorded as measured")

    def _slot_cost(self, cost: Cost) -> dict:
        return {"flops": float(cost.flops), "bytes": float(cost.bytes)}

    def predict(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None = None,
                implementation: str | None = None) -> rec.Record | None:
        """Write the roofline floor for this chip, unless the same prediction already holds the slot.

        cost None: the test's roofline marker gives it. implementation: the slot the prediction
        holds until a measurement replaces it (by default the floor; gate 04: compute-alone).
        """
        c = self.gate.criterion(criterion)
        cost = self._cost(cost)
        implementation = implementation or ("compute-alone" if c.ratio_of == "compute-alone" else "floor")
        prediction = predict(self.chip.per_device(), cost, dtype)
        slot = (self.gate.number, criterion, op, tuple(map(tuple, shapes)), dtype, self.chip.name, implementation)
        if any(r.slot == slot and r.method == "roofline-predicted" and r.value == prediction.floor_seconds
               and r.tree == self.provenance.tree for r in rec.read(self.records_path).records):
            return None  # the same prediction is on file (a measurement may hold the slot since)
        return self._record(criterion=criterion, implementation=implementation, op=op, shapes=shapes,
                            dtype=dtype, method="roofline-predicted", statistic="floor",
                            value=prediction.floor_seconds, unit="s", verdict="pending", interpret=False,
                            cost=self._slot_cost(cost), run_id=uuid.uuid4().hex,
                            notes=f"{prediction.bound}-bound")

    # ------------------------------------------------------------ correctness

    def verify(self, criterion: str, op: str, shapes, dtype: str, check, notes: str = "",
               work=()) -> GateResult:
        """A correctness criterion: run `check()` (the graded checks at the gate's problem).

        Writes one kernel row, pass or fail: `off-chip-verified` under interpret mode or
        on a CPU, `measured` when the kernel ran natively on the chip. Code not written yet
        (TODO) verifies nothing, writes no row, and is reported as TODO. work: the gate-sized
        programs (own_work.Work) that must be the graded tree's own kernels doing the op
        (a gate that times the learner's own kernel needs them); otherwise the row fails, saying what was found.
        """
        from ..core.outcomes import GradingOutcome, Todo

        c = self.gate.criterion(criterion)
        if c.kind != "correctness":
            raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not a correctness criterion")
        if self.gate.times_own_kernel and self.tree_root is not None and not work:
            raise ValueError(f"{self.test_id}: gate {self.gate.number:02d} judges the learner's own kernel: "
                             f"pass work=[own_work.of_call(...)] to verify")
        native = self.on_accelerator and self.kernels_native and self._off_chip_because is None
        common = dict(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                      method="measured" if native else "off-chip-verified", statistic="checks-passed",
                      unit="check", interpret=not native, run_id=uuid.uuid4().hex)
        notes = "; ".join(filter(None, (self._off_chip_because, notes)))  # checked off the chip, and why
        where = f"{notes}; " if notes else ""
        try:
            check()
        except Todo:
            raise
        except (GradingOutcome, AssertionError) as failure:
            text = failure.render() if isinstance(failure, GradingOutcome) else str(failure)
            text = text.strip() or type(failure).__name__
            row = self._record(value=0.0, verdict="fail", notes=f"{where}{text.splitlines()[0]}", **common)
            return self._finish(GateResult(gate_criteria.FAIL, text, (row,)))
        found = self._not_own_work(work)
        if found:
            text = f"{c.id}: not your own kernel doing the op: " + "; ".join(found)
            row = self._record(value=0.0, verdict="fail", notes=f"{where}{text}",
                               **{**common, "statistic": rec.OWN_WORK})
            return self._finish(GateResult(gate_criteria.FAIL, text, (row,)))
        row = self._record(value=1.0, verdict="pass", notes=f"{where}the chapter's differential checks", **common)
        status = gate_criteria.PASS if native else gate_criteria.PASS_OFF_CHIP
        return self._finish(GateResult(status, f"{c.id}: {status}", (row,)))

    # ------------------------------------------------------------ the ways to measure

    def measure_floor(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None, fn,
                      inputs) -> GateResult:
        """Gate 0: time XLA's op and judge it against its roofline floor on this chip (floor.py).

        inputs(seed) builds one input set; it is called only when something is timed.
        """
        return floor.measure(self, criterion, op, shapes, dtype, cost, fn, inputs)

    def measure_trio(self, criteria, op: str, shapes, dtype: str, cost: Cost | None, *, floor, kernel,
                     ceiling, inputs, tpu_only=("kernel", "ceiling"), weights=(), one_custom_call=(),
                     also=None) -> GateResult:
        """Time floor (XLA), kernel and ceiling in the same rounds; judge the kernel by `criteria` (trio.py).

        criteria: a speed criterion id of this gate, or several. ceiling: a function, or {label:
        function} candidates of which the fastest correct one on this chip is the ceiling. kernel
        or ceiling None, or named in tpu_only off a TPU, is not runnable here. inputs(seed) builds
        one input set: operands for all three. weights: the operand indices XLA is also timed with
        fixed (the floor is the faster regime). one_custom_call: implementations that must time as
        one custom call. also: {label: function} further XLA programs said on the floor's row.
        """
        return trio.measure(self, criteria, op, shapes, dtype, cost, floor=floor, kernel=kernel, ceiling=ceiling,
                            inputs=inputs, tpu_only=tpu_only, weights=weights, one_custom_call=one_custom_call,
                            also=also)

    def measure_against_compute_alone(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None,
                                      *, kernel, compute_alone, kernel_inputs, compute_alone_inputs,
                                      kernel_reference, compute_alone_reference, devices: int,
                                      schedule_check=None) -> GateResult:
        """Gate 04: time a distributed kernel on `devices` chips and its compute alone; judge the
        ratio (multi_chip.py). kernel_inputs(seed), compute_alone_inputs(seed) build one input set each;
        schedule_check(): raises WrongResult when the kernel's program hides no communication."""
        return multi_chip.measure(self, criterion, op, shapes, dtype, cost, kernel=kernel, compute_alone=compute_alone,
                                  kernel_inputs=kernel_inputs, compute_alone_inputs=compute_alone_inputs,
                                  kernel_reference=kernel_reference, compute_alone_reference=compute_alone_reference,
                                  devices=devices, schedule_check=schedule_check)

    def has_devices(self, criterion: str, op: str, shapes, dtype: str, count: int) -> bool:
        """False, with a not-runnable row ("needs N chips"), on an accelerator with fewer than `count`
        devices. Off an accelerator True: simulated devices stand in."""
        return multi_chip.has_devices(self, criterion, op, shapes, dtype, count)

    def devices(self, criterion: str, op: str, shapes, dtype: str, count: int):
        """The devices a correctness check needing `count` devices builds its mesh from, in force for the
        block, or None (a not-runnable row written) when it cannot run here (multi_chip.devices)."""
        return multi_chip.devices(self, criterion, op, shapes, dtype, count)

    def _sweep_key(self, op: str, shapes, dtype: str):
        return ceiling_sweep.key(self, op, shapes, dtype)


def _dims(shapes) -> str:
    """Shapes as 4096x4096 · 4096x4096 (one shape or several)."""
    shapes = list(shapes)
    if shapes and not isinstance(shapes[0], (list, tuple)):
        shapes = [shapes]
    return " · ".join("x".join(str(d) for d in s) for s in shapes)

