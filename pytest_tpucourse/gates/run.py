"""The gate test's one object for measuring and recording (`gate_run`), and what a run's gates share.

Measure, judge and record are separate: the harness (timer.py) measures, `judge.py` turns
samples into verdicts, `records.py` writes rows. A GateRun ties them for one gate test and
returns a `GateResult` for each call; it never skips or fails the test itself. The plugin's
report hook turns the results into the test's outcome: "awaiting hardware" and "not runnable
here" into a skip, a failed criterion into a failure (`test_outcome`).

Three ways to measure:
  measure_floor  gate 0: XLA's op against its roofline floor.
  measure_trio   a kernel between the XLA floor and the public ceiling, timed in the same
                 rounds; the kernel row is judged by the gate's speed criteria from its
                 round-by-round ratios, the floor and ceiling rows are references. The ceiling
                 may be a sweep of candidates (block sizes): the fastest on the chip is used, or
                 the choice a sweep kept from an earlier run made (sweeps.py), timed again here.
  measure_against_compute_alone
                 gate 4: a distributed kernel on several chips against its own compute with
                 no communication; fewer chips than it needs is "not runnable", never a pass
                 (its compute alone is still timed on one chip; placement.py).
Before anything is timed, every timed implementation but the floor is checked against its
reference on every input set it will be timed on, and again after timing on inputs of a
fresh seed: an implementation whose output is wrong (zeros at the timed size, a cached
answer) gets a fail row and never a time.

A gate the table marks `times_own_kernel` (criteria.py; gates 01, 03, 04 and 05) judges the
learner's own kernel (own_work.py): its correctness criterion and, before anything is timed,
every timed kernel are checked on the gate-sized program; a kernel that is not the graded
tree's, or leaves the op's work to XLA, gets a fail row saying what was found.

Nothing is timed off an accelerator, or when the run asked for an interpreter
(`--interpret tpu|fast`): the roofline floor is recorded as a prediction instead. A
rehearsal (rehearsal.py) runs the whole path anyway, on a stand-in clock, as if on the chip.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import chips
from ..core.outcomes import RAISED_BY_GRADED_CODE
from ..grading.backend import DeviceFacts
from ..roofline import Cost, predict
from . import criteria as gate_criteria
from . import chip_compile, judge, own_work, placement, stats, sweeps, timer
from . import records as rec
from ..core.paths import shown_in_text
from .provenance import Provenance

INPUT_SETS = 3  # input sets each implementation is timed on, rotating
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

    # ------------------------------------------------------------ gate 0

    def measure_floor(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None, fn,
                      inputs) -> GateResult:
        """Gate 0: time XLA's op and judge it against its roofline floor on this chip.

        inputs(seed) builds one input set; it is called only when something is timed.
        """
        c = self.gate.criterion(criterion)
        if c.ratio_of != "roofline":
            raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not judged against a roofline floor")
        cost = self._cost(cost)
        self.predict(criterion, op, shapes, dtype, cost)
        waiting = self._why_nothing_is_timed(op, dtype, "roofline floor")
        if waiting:
            return self._finish(waiting)
        self.store.require()
        floor = predict(self.chip.per_device(), cost, dtype).floor_seconds
        try:
            timing = self.harness.measure({"floor": fn}, [inputs(seed) for seed in range(INPUT_SETS)])["floor"]
        except timer.TimingError as error:
            return self._finish(GateResult(gate_criteria.FAIL, f"{op} on {self.chip.name}: {error}"))
        judged = judge.judge_ratios([s / floor for s in timing.samples], c.ratio_range)
        s = timing.summary
        try:
            row = self._record(criterion=criterion, implementation="floor", op=op, shapes=shapes, dtype=dtype,
                               method="measured", statistic="median", value=s.median, unit="s", spread=s.iqr,
                               samples=timing.samples, ratio_to_floor=judged.median, ratio_ci=judged.interval,
                               verdict=judged.verdict, interpret=False, cost=self._slot_cost(cost),
                               run_id=uuid.uuid4().hex, notes=timing.describe(), **timed_fields(timing))
        except rec.HonestyError as error:
            return self._finish(GateResult(gate_criteria.FAIL, str(error)))
        self.store.store(None, timing)
        low, high = c.ratio_range
        message = (f"{op} {dtype} {list(map(tuple, shapes))} on {self.chip.name}: measured {s.median * 1e6:.1f} us "
                   f"is {judged.median:.2f}x its roofline floor {floor * 1e6:.1f} us (95% interval "
                   f"{_interval(judged.interval)}); the band is [{low}, {high}]")
        return self._finish(GateResult(judged.verdict, message, (row,), timed=True))

    # ------------------------------------------------------------ a kernel between floor and ceiling

    def measure_trio(self, criteria, op: str, shapes, dtype: str, cost: Cost | None, *, floor, kernel,
                     ceiling, inputs, tpu_only=("kernel", "ceiling")) -> GateResult:
        """Time floor (XLA), kernel and ceiling in the same rounds; judge the kernel by `criteria`.

        criteria: a speed criterion id of this gate, or several, each judged from the kernel's
        round-by-round ratios to the floor or the ceiling (Criterion.ratio_of). ceiling: a
        function, or {label: function} candidates (a block-size sweep) of which the fastest
        correct one on this chip is the ceiling. kernel or ceiling None, or named in tpu_only
        off a TPU, is not runnable here: a not-runnable row is written, never a pass.
        inputs(seed) builds one input set: operands for all three.
        """
        criteria = (criteria,) if isinstance(criteria, str) else tuple(criteria)
        judged = [self.gate.criterion(c) for c in criteria]
        for c in judged:
            if c.kind != "speed" or c.ratio_of not in ("floor", "ceiling"):
                raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not judged against "
                                 f"a measured floor or ceiling")
            if c.ratio_of == "ceiling" and not ceiling:
                raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} needs a ceiling kernel")
        if floor is None:
            raise ValueError(f"{self.test_id}: measure_trio needs the XLA floor implementation")
        cost = self._cost(cost)
        for c in judged:
            self.predict(c.id, op, shapes, dtype, cost)
        waiting = self._why_nothing_is_timed(op, dtype, "roofline floor")
        if waiting:
            return self._finish(waiting)
        self.store.require()

        run_id = uuid.uuid4().hex
        common = dict(op=op, shapes=shapes, dtype=dtype, method="measured", interpret=False, run_id=run_id)
        rows, problems = [], []
        users = {"kernel": judged, "ceiling": [c for c in judged if c.ratio_of == "ceiling"]}

        def not_runnable(name: str, why: str) -> None:
            for c in users[name]:
                rows.append(self._record(criterion=c.id, implementation=name, statistic="median", value=None,
                                         unit="s", verdict="not-runnable", notes=f"not runnable here: {why}",
                                         **common))

        def check_failed(name: str, message: str) -> None:
            for c in users[name]:
                rows.append(self._record(criterion=c.id, implementation=name, statistic=rec.TIMED_OUTPUT_CHECK,
                                         value=0.0, unit="check", verdict="fail", notes=message, **common))
            problems.append(message)

        fns = {"floor": floor}
        for name, fn in (("kernel", kernel), ("ceiling", ceiling)):
            if name == "ceiling" and not users["ceiling"]:
                continue
            if fn is None or (name in tpu_only and self.platform != "tpu"):
                not_runnable(name, "not given" if fn is None
                             else f"a TPU Pallas kernel cannot run on {self.device.device_kind}")
            else:
                fns[name] = fn
        try:
            input_sets = [inputs(seed) for seed in range(INPUT_SETS)]
            if "kernel" in fns:
                found = self._not_own_work([self._timed_kernel_work(fns["kernel"], input_sets[0], cost)])
                if found:
                    for c in users["kernel"]:
                        rows.append(self._record(criterion=c.id, implementation="kernel", statistic=rec.OWN_WORK,
                                                 value=0.0, unit="check", verdict="fail",
                                                 notes="; ".join(found), **common))
                    return self._finish(self._trio_result(op, dtype, shapes, found, rows, judged))
                refused = self._refused_at_gate_size(fns["kernel"], input_sets[0])
                if refused:  # what the chip would refuse before timing anything: no row, the test fails
                    return self._finish(GateResult(gate_criteria.FAIL, refused, tuple(rows)))
            expected = [floor(*args) for args in input_sets]
            sweep_notes = ""
            if isinstance(fns.get("ceiling"), dict):
                fns["ceiling"], sweep_notes = self._tune_ceiling(fns["ceiling"], input_sets, expected, dtype,
                                                                 self._sweep_key(op, shapes, dtype))
                if fns["ceiling"] is None:
                    check_failed("ceiling", f"no ceiling candidate was correct: {sweep_notes}")
                    del fns["ceiling"]
            for name in [n for n in ("kernel", "ceiling") if n in fns]:
                wrong = _wrong_output(name, fns[name], input_sets, expected, dtype)
                if wrong:
                    check_failed(name, f"before timing: {wrong}")
                    del fns[name]
            if problems:  # a wrong kernel or ceiling: its fail row stands and nothing is timed
                return self._finish(self._trio_result(op, dtype, shapes, problems, rows, judged))
            # A kernel that cannot run here still leaves XLA's floor (and the ceiling) worth timing:
            # they are references on this chip, and the kernel's row says it is not runnable.
            try:
                timings = self.harness.measure(fns, input_sets)
            except timer.ImplementationFailed as failure:
                check_failed(failure.name if failure.name in users else "kernel", f"while timing: {failure}")
                return self._finish(self._trio_result(op, dtype, shapes, problems, rows, judged))
            fresh = int(run_id[:8], 16)
            fresh_inputs = [inputs(fresh)]
            fresh_expected = [floor(*fresh_inputs[0])]
            for name in [n for n in ("kernel", "ceiling") if n in fns]:
                wrong = _wrong_output(name, fns[name], fresh_inputs, fresh_expected, dtype)
                if wrong:
                    check_failed(name, f"after timing, on inputs of seed {fresh}: {wrong}")
                    del timings[name]
            for name, timing in timings.items():
                self.store.store(None if name == "kernel" else name, timing)
            rows += self._trio_rows(judged, timings, common, sweep_notes)
        except rec.HonestyError as error:
            return self._finish(GateResult(gate_criteria.FAIL, str(error), tuple(rows)))
        return self._finish(self._trio_result(op, dtype, shapes, problems, rows, judged))

    def _trio_rows(self, judged, timings, common, sweep_notes: str) -> list[rec.Record]:
        rows = []
        floor = timings["floor"].samples
        ceiling = timings["ceiling"].samples if "ceiling" in timings else None
        for c in judged:
            for name in ("floor", "ceiling"):
                if name not in timings or (name == "ceiling" and c.ratio_of != "ceiling"):
                    continue
                t = timings[name]
                to_floor = stats.median(stats.paired_ratios(t.samples, floor))
                notes = t.describe() + (f"; {sweep_notes}" if name == "ceiling" and sweep_notes else "")
                rows.append(self._record(criterion=c.id, implementation=name, statistic="median",
                                         value=t.summary.median, unit="s", spread=t.summary.iqr,
                                         samples=t.samples, ratio_to_floor=to_floor, verdict="reference",
                                         notes=notes, **timed_fields(t), **common))
            if "kernel" not in timings or (c.ratio_of == "ceiling" and ceiling is None):
                continue
            t = timings["kernel"]
            ratios = {"floor": stats.paired_ratios(t.samples, floor)}
            if ceiling is not None and c.ratio_of == "ceiling":
                ratios["ceiling"] = stats.paired_ratios(t.samples, ceiling)
            verdict = judge.judge_ratios(ratios[c.ratio_of], c.ratio_range)
            to = {name: stats.median(r) for name, r in ratios.items()}
            rows.append(self._record(criterion=c.id, implementation="kernel", statistic="median",
                                     value=t.summary.median, unit="s", spread=t.summary.iqr, samples=t.samples,
                                     ratio_to_floor=to["floor"], ratio_to_ceiling=to.get("ceiling"),
                                     ratio_ci=verdict.interval, verdict=verdict.verdict, notes=t.describe(),
                                     **timed_fields(t), **common))
        return rows

    def _trio_result(self, op, dtype, shapes, problems, rows, judged) -> GateResult:
        where = f"{op} {dtype} {list(map(tuple, shapes))} on {self.chip.name}"
        failures = list(problems)
        for r in rows:
            if r.implementation == "kernel" and r.verdict == "fail" and r.statistic == "median":
                c = self.gate.criterion(r.criterion)
                ratio = r.ratio_to_floor if c.ratio_of == "floor" else r.ratio_to_ceiling
                failures.append(f"{c.id}: kernel {r.value * 1e6:.1f} us is {ratio:.2f}x the {c.ratio_of} (95% "
                                f"interval {_interval(r.ratio_ci)}), not inside [{c.ratio_range[0]}, "
                                f"{c.ratio_range[1]:.3g}]")
        if failures:
            return GateResult(gate_criteria.FAIL, f"{where}: " + "; ".join(dict.fromkeys(failures)), tuple(rows),
                              timed=not problems)
        blocked = [r for r in rows if r.verdict == "not-runnable"]
        if blocked:
            timed = sorted({r.implementation for r in rows if r.statistic == "median" and r.value is not None})
            return GateResult(gate_criteria.NOT_RUNNABLE,
                              f"{'kernel' if any(r.implementation == 'kernel' for r in blocked) else 'ceiling'} "
                              f"not runnable on {self.device.device_kind} ({self.chip.name}): recorded as not "
                              f"runnable; measured: {' and '.join(timed) or 'nothing'}", tuple(rows))
        passed = ", ".join(f"{c.id} pass" for c in judged)
        return GateResult(gate_criteria.PASS, f"{where}: {passed}", tuple(rows), timed=True)

    def _sweep_key(self, op: str, shapes, dtype: str) -> sweeps.SweepKey:
        p = self.provenance
        return sweeps.SweepKey(chip=self.chip.name, device_kind=p.device_kind, jax=p.jax, jaxlib=p.jaxlib,
                               libtpu=p.libtpu, gate=self.gate.number, op=op, shapes=shapes, dtype=dtype)

    def _tune_ceiling(self, candidates: dict, input_sets, expected, dtype, key: sweeps.SweepKey):
        """The ceiling of a sweep of candidates on this chip, and the sweep as notes for its row.

        A sweep kept from an earlier run on this chip with these versions (sweeps.py) gives the
        choice, unless the run asked to sweep again (--resweep) or the kept choice is wrong here;
        either way the ceiling is then timed in this run's rounds and checked like any other.
        """
        path = self.context.sweeps_path
        earlier, source = self._kept_sweep(key, candidates)
        if earlier is not None:
            wrong = _wrong_output(f"ceiling {earlier.best}", candidates[earlier.best], input_sets, expected, dtype)
            if not wrong:
                return candidates[earlier.best], (f"ceiling {earlier.best}, the choice of a sweep {source} "
                                                  f"({earlier.describe()}), reused: only the choice, timed in "
                                                  f"this run's rounds (pytest --gates --resweep sweeps again)")
        correct, notes = {}, []
        for label, fn in candidates.items():
            wrong = _wrong_output(f"ceiling {label}", fn, input_sets, expected, dtype)
            if wrong:
                notes.append(f"{label}: wrong or failed ({wrong.splitlines()[0][:120]})")
            else:
                correct[label] = fn
        if not correct:
            return None, "; ".join(notes)
        timings = self.harness.measure(correct, input_sets) if len(correct) > 1 else None
        if timings is None:
            best = next(iter(correct))
        else:
            best = min(timings, key=lambda label: timings[label].summary.median)
            kept_note = self._keep_sweep(path, sweeps.Sweep(
                key=key, candidates=tuple(candidates), best=best, notes="; ".join(notes),
                times={label: t.summary.median for label, t in timings.items()}, rehearsal=self.rehearsal is not None))
            notes = [f"{label}: {t.summary.median * 1e6:.1f} us" for label, t in timings.items()] + notes + kept_note
        again = f"the kept choice {earlier.best} was wrong here, swept again; " if earlier is not None else ""
        return correct[best], (f"{again}ceiling tuned over {len(candidates)} block sizes ({'; '.join(notes)}): "
                               f"chose {best}")

    def _kept_sweep(self, key: sweeps.SweepKey, candidates) -> tuple[sweeps.Sweep | None, str]:
        """A sweep kept for this key, and where from: this checkout's own earlier runs first
        (.tpucourse/), then the sweeps the course ships for this chip kind and these versions
        (sweeps.COURSE_PATH); none under --resweep."""
        if self.context.resweep:
            return None, ""
        own, course = self.context.sweeps_path, self.context.course_sweeps_path
        if own is not None and (found := sweeps.kept(own, key, candidates)) is not None:
            return found, "kept from an earlier run"
        if course is not None and (found := sweeps.kept(course, key, candidates)) is not None:
            return found, f"the course made on a {key.device_kind} with these versions ({sweeps.COURSE_PATH})"
        return None, ""

    @staticmethod
    def _keep_sweep(path, sweep: sweeps.Sweep) -> list[str]:
        """Keep a sweep for later runs; a file that cannot be written costs the next run a sweep, not this one."""
        if path is None:
            return []
        try:
            sweeps.keep(path, sweep)
        except OSError as error:
            return [f"the sweep could not be kept for later runs ({error.strerror or error})"]
        return []

    # ------------------------------------------------------------ gate 4

    def has_devices(self, criterion: str, op: str, shapes, dtype: str, count: int) -> bool:
        """False, with a not-runnable row ("needs N chips"), on an accelerator with fewer than `count`
        devices. Off an accelerator True: simulated devices stand in."""
        self.gate.criterion(criterion)
        have = self.device.device_count
        if not self.on_accelerator or have >= count:
            return True
        why = placement.too_few_chips(count, have, self.device.device_kind)
        row = self._too_few_chips_row(criterion, op, shapes, dtype, uuid.uuid4().hex, f"not runnable here: {why}")
        self._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"{op} on {self.chip.name}: {why}; recorded as "
                                                            f"not runnable", (row,)))
        return False

    def _too_few_chips_row(self, criterion, op, shapes, dtype, run_id: str, notes: str) -> rec.Record:
        return self._record(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                            method="measured", statistic=placement.TOO_FEW_CHIPS, value=None, unit="s",
                            verdict="not-runnable", interpret=False, run_id=run_id, notes=notes)

    @contextlib.contextmanager
    def devices(self, criterion: str, op: str, shapes, dtype: str, count: int):
        """The devices a correctness check needing `count` devices builds its mesh from, in force for the
        block, or None (a not-runnable row written) when it cannot run here.

        On an accelerator with enough devices: the chip's. With fewer chips than `count`: `count`
        simulated CPU devices under TPU interpret mode, and `verify` inside the block writes an
        off-chip-verified row saying why. Off an accelerator: the run's own simulated devices (the
        test is skipped, as the mesh fixture skips, when --cpu-devices gave fewer).
        """
        where = placement.placement(on_accelerator=self.on_accelerator, chips=self.device.device_count,
                                    device_kind=self.device.device_kind, cpu_devices=placement.cpu_device_count(),
                                    count=count)
        if where.where == placement.NOWHERE:
            self.gate.criterion(criterion)
            row = self._too_few_chips_row(criterion, op, shapes, dtype, uuid.uuid4().hex,
                                          f"not runnable here: {where.why}")
            self._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"{op} on {self.chip.name}: {where.why}; "
                                                                f"recorded as not runnable", (row,)))
            yield None
            return
        if where.where == placement.RUN_DEVICES and self.device.device_count < count:
            import pytest  # as the mesh fixture does: a CPU run asked for fewer simulated devices

            pytest.skip(f"needs {count} devices; this run has {self.device.device_count} CPU device(s) "
                        f"(--cpu-devices)")
        self._off_chip_because = where.why if where.where == placement.ON_CPU_DEVICES else None
        try:
            with placement.devices(where) as found:
                yield found
        finally:
            self._off_chip_because = None

    def measure_against_compute_alone(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None,
                                      *, kernel, compute_alone, kernel_inputs, compute_alone_inputs,
                                      kernel_reference, compute_alone_reference, devices: int) -> GateResult:
        """Gate 04: time a distributed kernel on `devices` chips and its compute alone; judge the ratio.

        compute_alone: the same work per chip with no communication at all. Each is checked
        against its XLA reference before and after timing; both are timed in the same rounds.
        kernel_inputs(seed), compute_alone_inputs(seed) build one input set each. On a CPU the
        roofline floor of one chip's compute is predicted. With fewer than `devices` chips the
        compute alone is still timed on one chip (when given), and the kernel is recorded as not
        runnable ("needs N chips"), never a pass.
        """
        c = self.gate.criterion(criterion)
        if c.kind != "speed" or c.ratio_of != "compute-alone":
            raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not judged against a "
                             f"compute-alone time")
        cost = self._cost(cost)
        self.predict(criterion, op, shapes, dtype, cost, implementation="compute-alone")
        waiting = self._why_nothing_is_timed(op, dtype, "roofline floor of one chip's compute")
        if waiting:
            return self._finish(waiting)
        have = self.device.device_count
        if have < devices and (compute_alone is None or self.platform != "tpu"):
            self.has_devices(criterion, op, shapes, dtype, devices)
            return self.results[-1]
        run_id = uuid.uuid4().hex
        common = dict(criterion=criterion, op=op, shapes=shapes, dtype=dtype, method="measured",
                      interpret=False, run_id=run_id)
        if self.platform != "tpu":
            row = self._record(implementation="kernel", statistic="median", value=None, unit="s",
                               verdict="not-runnable", notes=f"not runnable here: a TPU Pallas kernel cannot "
                                                             f"run on {self.device.device_kind}", **common)
            return self._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"a TPU Pallas kernel cannot run on "
                                           f"{self.device.device_kind}: recorded as not runnable", (row,)))
        self.store.require()
        both = {"kernel": (kernel, kernel_inputs, kernel_reference),
                "compute-alone": (compute_alone, compute_alone_inputs, compute_alone_reference)}
        if have < devices:  # the compute alone on the one chip; the ring needs chips this run has not
            del both["kernel"]
        try:
            sets = {name: [build(seed) for seed in range(INPUT_SETS)] for name, (_, build, _) in both.items()}
            found = self._not_own_work([self._timed_kernel_work(fn, sets[name][0], cost, f"the timed {name}")
                                        for name, (fn, _, _) in both.items()])
            if found:
                row = self._record(implementation="kernel", statistic=rec.OWN_WORK, value=0.0, unit="check",
                                   verdict="fail", notes="; ".join(found), **common)
                return self._finish(GateResult(gate_criteria.FAIL, "; ".join(found), (row,)))
            for name, (fn, _, reference) in both.items():
                wrong = _wrong_output(name, fn, sets[name], [reference(*a) for a in sets[name]], dtype)
                if wrong:
                    return self._finish(self._check_failure(name, f"before timing: {wrong}", common))
            try:
                timings = _measure_apart(self.harness, {name: both[name][0] for name in both}, sets)
            except timer.ImplementationFailed as failure:
                return self._finish(self._check_failure(failure.name, f"while timing: {failure}", common))
            fresh = int(run_id[:8], 16)
            for name, (fn, build, reference) in both.items():
                args = build(fresh)
                wrong = _wrong_output(name, fn, [args], [reference(*args)], dtype)
                if wrong:
                    return self._finish(self._check_failure(name, f"after timing, on inputs of seed {fresh}: "
                                                                  f"{wrong}", common))
            alone = timings["compute-alone"]
            for name, t in timings.items():
                self.store.store(None if name == "kernel" else name, t)
            alone_row = self._record(implementation="compute-alone", statistic="median", value=alone.summary.median,
                                     unit="s", spread=alone.summary.iqr, samples=alone.samples, verdict="reference",
                                     notes=f"one chip, no communication; {alone.describe()}", **timed_fields(alone),
                                     **common)
            if "kernel" not in timings:
                return self._finish(self._compute_alone_only(c, devices, alone, alone_row, common))
            mine = timings["kernel"]
            verdict = judge.judge_ratios(stats.paired_ratios(mine.samples, alone.samples), c.ratio_range)
            rows = (alone_row,
                    self._record(implementation="kernel", statistic="median", value=mine.summary.median, unit="s",
                                 spread=mine.summary.iqr, samples=mine.samples,
                                 ratio_to_compute_alone=verdict.median, ratio_ci=verdict.interval,
                                 verdict=verdict.verdict, notes=f"{devices} chips; {mine.describe()}",
                                 **timed_fields(mine), **common))
        except rec.HonestyError as error:
            return self._finish(GateResult(gate_criteria.FAIL, str(error)))
        low, high = c.ratio_range
        message = (f"{op} {dtype} {list(map(tuple, shapes))} on {devices} {self.chip.name} chips: "
                   f"{mine.summary.median * 1e6:.1f} us is {verdict.median:.2f}x its compute alone "
                   f"({alone.summary.median * 1e6:.1f} us; 95% interval {_interval(verdict.interval)}); "
                   f"the range is [{low}, {high}]")
        return self._finish(GateResult(verdict.verdict, message, rows, timed=True))

    def _compute_alone_only(self, c, devices: int, alone, alone_row, common) -> GateResult:
        """Too few chips for the kernel: its compute alone was timed on one chip; the kernel is not runnable."""
        short = placement.too_few_chips(devices, self.device.device_count, self.device.device_kind)
        kernel_row = self._too_few_chips_row(
            c.id, common["op"], common["shapes"], common["dtype"], common["run_id"],
            f"not runnable here: {short}; its compute alone measured on one chip "
            f"({alone.summary.median * 1e6:.1f} us), the communication checked off-chip by the correctness criterion")
        message = (f"not runnable on {_chips_word(self.device.device_count)} (needs {devices} chips): compute alone "
                   f"measured, {alone.summary.median * 1e6:.1f} us on one {self.chip.name} chip; the collective "
                   f"{common['op']} is timed on {devices} chips")
        return GateResult(gate_criteria.NOT_RUNNABLE, message, (alone_row, kernel_row))

    def _check_failure(self, name: str, message: str, common: dict) -> GateResult:
        row = self._record(implementation=name, statistic=rec.TIMED_OUTPUT_CHECK, value=0.0, unit="check",
                           verdict="fail", notes=message, **common)
        return GateResult(gate_criteria.FAIL, message, (row,))


def timed_fields(timing) -> dict:
    """How a Timing was taken, as its row says it (records.TIMING_METHODS).

    A harness that does not say timed wall-calls, the only method there was before. The
    dispatch_bound of a device-trace time is the judge's rule applied to the Timing's own wall
    time per call and median, so the row always survives re-judging.
    """
    method = getattr(timing, "method", rec.ASSUMED_TIMING)
    wall = getattr(timing, "wall_per_call", None)  # one per sample: the row keeps their median
    if isinstance(wall, (tuple, list)):
        wall = stats.median(wall) if wall else None
    wall = None if wall is None else float(wall)
    if method == "device-profiler" and wall is not None:
        bound = judge.dispatch_bound(wall, timing.summary.median)
    else:
        bound = bool(getattr(timing, "dispatch_bound", False))
    return dict(timed_by=method, wall_per_call=wall, dispatch_bound=bound)


def _measure_apart(harness, fns: dict, sets: dict) -> dict:
    """Gate 04's kernel and compute alone take different inputs: each is timed on its own sets,
    in the same interleaved rounds (a wrapper picks each one's operands by round)."""
    names = list(fns)
    bundles = [tuple(sets[name][i] for name in names) for i in range(INPUT_SETS)]
    wrapped = {name: (lambda fn, k: (lambda *bundle: fn(*bundle[k])))(fns[name], k) for k, name in enumerate(names)}
    return harness.measure(wrapped, bundles)


def _wrong_output(name: str, fn, input_sets, expected, dtype: str) -> str | None:
    """Why fn's outputs on these inputs are not its reference's (values only), or None.

    The bound is twice the tolerance rule's ceiling for the output's dtype: a kernel and a
    floor each within the rule of the float64 truth are within twice it of each other. It
    catches zeros, garbage and another input's answer, not a last-bit difference.
    """
    import jax
    import numpy as np

    from ..core import tolerance

    for i, (args, want) in enumerate(zip(input_sets, expected)):
        try:
            got = jax.block_until_ready(fn(*args))
        except RAISED_BY_GRADED_CODE as error:  # the learner's kernel
            # at the timed size; a kernel that calls pytest.skip() fails its check, it is not skipped
            return f"{name} raised {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        got_leaves, got_tree = jax.tree.flatten(got)
        want_leaves, want_tree = jax.tree.flatten(want)
        if got_tree != want_tree:
            return f"{name} returned {got_tree}, expected {want_tree} (input set {i})"
        for j, (g, w) in enumerate(zip(got_leaves, want_leaves)):
            g, w = np.asarray(g), np.asarray(w)
            what = f"{name} output {j} on input set {i}"
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"{what} is {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
            if not np.issubdtype(w.dtype, np.floating) and w.dtype.name != "bfloat16":
                if not np.array_equal(g, w):
                    return f"{what} differs from its reference"
                continue
            bound = 2 * tolerance.CEILING.get(w.dtype.name, 1e-2)
            error = tolerance.relative_error(g.astype(np.float64), w.astype(np.float64))
            if not error <= bound:
                return (f"{what} is wrong at the timed size: relative error {error:.3g} against its reference "
                        f"(bound {bound:.0e})")
    return None


def _chips_word(count: int) -> str:
    return "one chip" if count == 1 else f"{count} chips"


def _dims(shapes) -> str:
    """Shapes as 4096x4096 · 4096x4096 (one shape or several)."""
    shapes = list(shapes)
    if shapes and not isinstance(shapes[0], (list, tuple)):
        shapes = [shapes]
    return " · ".join("x".join(str(d) for d in s) for s in shapes)


def _interval(interval) -> str:
    return "none: too few rounds" if interval is None else f"[{interval[0]:.3g}, {interval[1]:.3g}]"


@dataclass(frozen=True)
class GateContext:
    """What every gate test of a run shares: the chip, the device read at the start, the thresholds
    captured at the start, where rows go."""

    registry: chips.ChipRegistry
    chip: chips.Chip | None  # None: an accelerator we have no figures for, gates not asked for
    device: DeviceFacts
    records_path: Path
    root: Path
    gates: tuple = field(default_factory=judge.snapshot)
    interpret_requested: bool = False
    kernels_native: bool = False
    rehearsal: object = None  # a rehearsal.Rehearsal for `--rehearse`
    sweeps_path: Path | None = None  # where ceiling sweeps are kept between runs (sweeps.py); None: not kept
    course_sweeps_path: Path | None = None  # the course's own sweeps, read after the run's (sweeps.COURSE_PATH)
    resweep: bool = False  # sweep every ceiling again, whatever is kept

    @property
    def on_accelerator(self) -> bool:
        return self.device.is_accelerator

    @property
    def platform(self) -> str:
        return self.device.platform

    @property
    def device_kind(self) -> str:
        return self.device.device_kind


def gate_context(registry: chips.ChipRegistry, requested: str | None, device: DeviceFacts,
                 records_path: Path, root: Path, *, strict: bool, interpret_requested: bool = False,
                 kernels_native: bool = False, rehearsal=None, sweeps_path: Path | None = None,
                 course_sweeps_path: Path | None = None, resweep: bool = False) -> GateContext:
    """Resolve the run's chip. strict: a chip that cannot be named for this device is an error."""
    try:
        name = chips.chip_for_run(requested, device.platform, device.device_kind, registry)
    except chips.ChipMismatch:
        if strict:
            raise
        name = None
    if name is None and device.platform == "cpu":
        name = chips.DEFAULT_CHIP
    return GateContext(registry=registry, chip=registry.get(name) if name else None, device=device,
                       records_path=records_path, root=root, interpret_requested=interpret_requested,
                       kernels_native=kernels_native, rehearsal=rehearsal, sweeps_path=sweeps_path,
                       course_sweeps_path=course_sweeps_path, resweep=resweep)
