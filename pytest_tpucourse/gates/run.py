"""The gate test's one object for writing honest rows (`gate_run`), and what a run's gates share.

A gate test asks for the `gate_run` fixture. On an accelerator it times the target
(timer.py) and writes a measured row with the median and interquartile range. On a
CPU nothing is timed: it writes the roofline prediction for the chip and the test
is skipped as awaiting hardware.

Three ways to measure:
  measure_floor  gate 0: XLA's op against its roofline floor.
  measure_against_compute_alone
                 gate 4: a distributed kernel on several chips against its own compute
                 with no communication; fewer chips than it needs is recorded as
                 "needs N chips", not runnable, never a pass.
  measure_trio   a kernel between the XLA floor and the public ceiling
                 (jax.experimental.pallas.ops.tpu), all three timed in the same run,
                 one row each; the kernel row is judged by the gate's speed criteria
                 from the measured ratios, the floor and ceiling rows are references.
                 A TPU Pallas kernel on a GPU is recorded as not runnable, never as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .. import chips
from . import criteria as gate_criteria
from . import records as rec
from ..roofline import Cost, predict
from .provenance import Provenance, provenance


class GateRun:
    """Writes the rows of one gate test; judges measured ones by the gate's criterion."""

    def __init__(self, *, gate: int, chapter: str, test_id: str, chip: chips.Chip,
                 on_accelerator: bool, provenance: Provenance, records_path: Path, timer_factory,
                 marker_cost: Cost | None = None, interpreted: bool = True, graded: str = ""):
        self.gate = gate_criteria.gate(gate)
        self.chapter = chapter
        self.test_id = test_id
        self.chip = chip
        self.on_accelerator = on_accelerator
        self.provenance = provenance
        self.records_path = Path(records_path)
        self._timer_factory = timer_factory
        self.marker_cost = marker_cost  # from the test's @pytest.mark.roofline(flops=, bytes=)
        self.interpreted = interpreted  # kernels ran under a Pallas interpreter in this session
        self.graded = graded  # which tree the kernels came from, for the rows' notes

    @property
    def platform(self) -> str:
        return self.provenance.platform

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
        row = rec.Record(gate=self.gate.number, chapter=self.chapter, test_id=self.test_id,
                         chip=self.chip.name, platform=p.platform, device_kind=p.device_kind,
                         jax=p.jax, jaxlib=p.jaxlib, libtpu=p.libtpu, git_commit=p.git_commit,
                         host=p.host, **fields)
        rec.append(self.records_path, row)
        return row

    def predict(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None = None,
                implementation: str = "floor") -> rec.Record | None:
        """Write the roofline floor for this chip, unless the same prediction already holds the slot.

        cost None: the test's roofline marker gives it. implementation: the slot the prediction
        holds until a measurement replaces it ("compute-alone" for gate 04).
        """
        self.gate.criterion(criterion)
        cost = self._cost(cost)
        floor = predict(self.chip.per_device(), cost).floor_seconds
        slot = (self.gate.number, criterion, op, tuple(map(tuple, shapes)), dtype, self.chip.name, implementation)
        if any(r.slot == slot and r.method == "roofline-predicted" and r.value == floor
               for r in rec.read(self.records_path)):
            return None  # the same prediction is on file (a measurement may hold the slot since)
        return self._record(criterion=criterion, implementation=implementation, op=op, shapes=shapes,
                            dtype=dtype, method="roofline-predicted", statistic="floor", value=floor,
                            unit="s", verdict="pending", interpret=False,
                            notes=f"{predict(self.chip.per_device(), cost).bound}-bound")

    def verify(self, criterion: str, op: str, shapes, dtype: str, check, notes: str = "") -> rec.Record | None:
        """A correctness criterion: run `check()` (the graded checks at the gate's problem).

        Writes one kernel row, pass or fail: `off-chip-verified` under interpret mode or
        on a CPU, `measured` when the kernel ran natively on the chip. A failure is
        recorded before it is re-raised, so it stays on file. Code not written yet (TODO)
        verifies nothing and writes no row. notes: what the check ran on, kept in the row.
        """
        from ..outcomes import GradingOutcome, Todo

        c = self.gate.criterion(criterion)
        if c.kind != "correctness":
            raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not a correctness criterion")
        native = self.on_accelerator and not self.interpreted
        common = dict(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                      method="measured" if native else "off-chip-verified", statistic="checks-passed",
                      unit="check", interpret=not native)
        where = f"graded tree {self.graded}; " if self.graded else ""
        where += f"{notes}; " if notes else ""
        try:
            check()
        except Todo:
            raise
        except (GradingOutcome, AssertionError) as failure:
            first = str(failure).strip().splitlines()[0] if str(failure).strip() else type(failure).__name__
            self._record(value=0.0, verdict="fail", notes=f"{where}{first}"[:500], **common)
            raise
        return self._record(value=1.0, verdict="pass", notes=f"{where}the chapter's differential checks",
                            **common)

    def measure_floor(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None, fn, input_sets):
        """Gate 0: time XLA's op and judge it against its roofline floor on this chip.

        On a CPU: writes the prediction and skips the test (awaiting hardware).
        """
        c = self.gate.criterion(criterion)
        cost = self._cost(cost)
        self.predict(criterion, op, shapes, dtype, cost)
        if not self.on_accelerator:
            pytest.skip(f"awaiting hardware: {op} {dtype} roofline floor predicted for {self.chip.name}; "
                        f"nothing is timed off-chip")
        floor = predict(self.chip.per_device(), cost).floor_seconds
        stats = self._timer_factory().measure(fn, input_sets)
        ratio = stats.median / floor
        verdict = c.judge(ratio)
        self._record(criterion=criterion, implementation="floor", op=op, shapes=shapes, dtype=dtype,
                     method="measured", statistic="median", value=stats.median, unit="s",
                     spread=stats.iqr, ratio_to_floor=ratio, verdict=verdict, interpret=False,
                     notes=f"{stats.rounds} rounds over {len(input_sets)} input sets")
        if verdict == gate_criteria.FAIL:
            low, high = c.ratio_range
            pytest.fail(f"{op} {dtype} {shapes} on {self.chip.name}: measured {stats.median * 1e6:.1f} us "
                        f"is {ratio:.2f}x its roofline floor {floor * 1e6:.1f} us, outside "
                        f"[{low}, {high}]", pytrace=False)
        return stats

    def measure_trio(self, criteria, op: str, shapes, dtype: str, cost: Cost | None, *, floor, kernel,
                     ceiling, input_sets, tpu_only=("kernel", "ceiling")) -> dict:
        """Time floor (XLA), kernel and ceiling in one run; judge the kernel by `criteria`.

        criteria: a speed criterion id of this gate, or several; each is judged from the
        measured kernel time divided by the floor's or the ceiling's (Criterion.ratio_of).
        For each criterion one row per implementation is written: the kernel row carries
        the verdict and both ratios; floor and ceiling rows are references. kernel or
        ceiling None, or named in tpu_only on a non-TPU platform, is not runnable here: a
        not-runnable row is written and the test is skipped, never passed.

        On a CPU nothing is timed: the roofline floor is predicted for each criterion and
        the test is skipped as awaiting hardware. Returns {implementation: Stats | None}.
        """
        criteria = (criteria,) if isinstance(criteria, str) else tuple(criteria)
        judged = [self.gate.criterion(c) for c in criteria]
        for c in judged:
            if c.kind != "speed" or c.ratio_of not in ("floor", "ceiling"):
                raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not judged against "
                                 f"a measured floor or ceiling")
            if c.ratio_of == "ceiling" and ceiling is None:
                raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} needs a ceiling kernel")
        if floor is None:
            raise ValueError(f"{self.test_id}: measure_trio needs the XLA floor implementation")
        cost = self._cost(cost)
        for c in judged:
            self.predict(c.id, op, shapes, dtype, cost)
        if not self.on_accelerator:
            pytest.skip(f"awaiting hardware: {op} {dtype} roofline floor predicted for {self.chip.name}; "
                        f"floor, kernel and ceiling are timed only on the chip")
        if not input_sets:
            raise ValueError(f"{self.test_id}: measure_trio needs at least one input set")

        fns = {"floor": floor, "kernel": kernel, "ceiling": ceiling}
        runnable = {name: fn is not None and not (name in tpu_only and self.platform != "tpu")
                    for name, fn in fns.items()}
        stats = {name: self._timer_factory(None if name == "kernel" else name).measure(fns[name], input_sets)
                 if runnable[name] else None for name in ("floor", "kernel", "ceiling")}
        t_floor, t_ceiling = stats["floor"].median, stats["ceiling"].median if stats["ceiling"] else None

        def ratios(seconds):
            return seconds / t_floor, (seconds / t_ceiling if t_ceiling else None)

        failures = []
        for c in judged:
            common = dict(criterion=c.id, op=op, shapes=shapes, dtype=dtype, method="measured", unit="s",
                          interpret=False)
            for name in ("floor", "ceiling", "kernel"):
                if fns[name] is None and name == "ceiling":
                    continue  # no public kernel for this op: nothing to record
                s_ = stats[name]
                if s_ is None:
                    why = ("not given" if fns[name] is None
                           else f"a TPU Pallas kernel cannot run on {self.provenance.device_kind}")
                    self._record(implementation=name, statistic="median", value=None,
                                 verdict="not-runnable", notes=f"not runnable here: {why}", **common)
                    continue
                to_floor, to_ceiling = ratios(s_.median)
                if name == "kernel":
                    if c.ratio_of == "ceiling" and to_ceiling is None:
                        continue  # the ceiling's not-runnable row speaks for this criterion
                    verdict = c.judge(to_floor if c.ratio_of == "floor" else to_ceiling)
                    if verdict == gate_criteria.FAIL:
                        failures.append(f"{c.id}: kernel {s_.median * 1e6:.1f} us is "
                                        f"{to_floor if c.ratio_of == 'floor' else to_ceiling:.2f}x the "
                                        f"{c.ratio_of}, outside [{c.ratio_range[0]}, {c.ratio_range[1]:.3g}]")
                else:
                    verdict = "reference"
                self._record(implementation=name, statistic="median", value=s_.median, spread=s_.iqr,
                             ratio_to_floor=to_floor, ratio_to_ceiling=to_ceiling, verdict=verdict,
                             notes=f"{s_.rounds} rounds over {len(input_sets)} input sets", **common)
        if failures:
            pytest.fail(f"{op} {dtype} {shapes} on {self.chip.name}: " + "; ".join(failures), pytrace=False)
        if stats["kernel"] is None:
            timed = " and ".join(name for name in ("floor", "ceiling") if stats[name] is not None)
            pytest.skip(f"kernel not runnable on {self.provenance.device_kind} ({self.chip.name}): "
                        f"recorded as not runnable; measured: {timed}")
        return stats

    def needs_devices(self, criterion: str, op: str, shapes, dtype: str, count: int) -> None:
        """On an accelerator with fewer than `count` devices: a not-runnable row ("needs N chips")
        and a skip, never a pass. Off an accelerator nothing: simulated devices stand in."""
        import jax

        self.gate.criterion(criterion)
        have = jax.device_count()
        if not self.on_accelerator or have >= count:
            return
        why = f"needs {count} chips; this run has {have} {self.provenance.device_kind}"
        self._record(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                     method="measured", statistic="median", value=None, unit="s", verdict="not-runnable",
                     interpret=False, notes=f"not runnable here: {why}")
        pytest.skip(f"{op} on {self.chip.name}: {why}; recorded as not runnable")

    def measure_against_compute_alone(self, criterion: str, op: str, shapes, dtype: str, cost: Cost | None,
                                      *, kernel, compute_alone, kernel_inputs, compute_alone_inputs,
                                      devices: int) -> dict:
        """Gate 04: time a distributed kernel on `devices` chips and its compute alone; judge the ratio.

        compute_alone: the same work per chip with no communication at all (for the collective
        matmul, the learner's own kernel on a one-device ring, given the gathered input). Both are
        timed in this run, on this chip; the kernel row carries ratio_to_compute_alone and the
        verdict, the compute-alone row is a reference. On a CPU the roofline floor of the per-chip
        compute is predicted and the test is skipped as awaiting hardware; with fewer than
        `devices` chips a not-runnable row is written ("needs N chips").
        """
        c = self.gate.criterion(criterion)
        if c.kind != "speed" or c.ratio_of != "compute-alone":
            raise ValueError(f"gate {self.gate.number:02d} criterion {c.id} is not judged against a "
                             f"compute-alone time")
        cost = self._cost(cost)
        self.predict(criterion, op, shapes, dtype, cost, implementation="compute-alone")
        if not self.on_accelerator:
            pytest.skip(f"awaiting hardware: {op} {dtype} roofline floor of one chip's compute predicted "
                        f"for {self.chip.name}; the kernel and its compute alone are timed only on chips")
        self.needs_devices(criterion, op, shapes, dtype, devices)
        if self.platform != "tpu":
            self._record(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                         method="measured", statistic="median", value=None, unit="s", verdict="not-runnable",
                         interpret=False, notes=f"not runnable here: a TPU Pallas kernel cannot run on "
                                                f"{self.provenance.device_kind}")
            pytest.skip(f"a TPU Pallas kernel cannot run on {self.provenance.device_kind}: recorded as "
                        f"not runnable")
        if not kernel_inputs or not compute_alone_inputs:
            raise ValueError(f"{self.test_id}: measure_against_compute_alone needs input sets for both")
        alone = self._timer_factory("compute-alone").measure(compute_alone, compute_alone_inputs)
        mine = self._timer_factory(None).measure(kernel, kernel_inputs)
        ratio = mine.median / alone.median
        verdict = c.judge(ratio)
        common = dict(criterion=criterion, op=op, shapes=shapes, dtype=dtype, method="measured",
                      statistic="median", unit="s", interpret=False)
        self._record(implementation="compute-alone", value=alone.median, spread=alone.iqr,
                     verdict="reference", notes=f"one chip, no communication; {alone.rounds} rounds over "
                                                f"{len(compute_alone_inputs)} input sets", **common)
        self._record(implementation="kernel", value=mine.median, spread=mine.iqr,
                     ratio_to_compute_alone=ratio, verdict=verdict,
                     notes=f"{devices} chips; {mine.rounds} rounds over {len(kernel_inputs)} input sets",
                     **common)
        if verdict == gate_criteria.FAIL:
            low, high = c.ratio_range
            pytest.fail(f"{op} {dtype} {shapes} on {devices} {self.chip.name} chips: {mine.median * 1e6:.1f} us "
                        f"is {ratio:.2f}x its compute alone ({alone.median * 1e6:.1f} us), outside "
                        f"[{low}, {high}]", pytrace=False)
        return {"kernel": mine, "compute-alone": alone}


@dataclass(frozen=True)
class GateContext:
    """What every gate test of a run shares: the chip, the device, where rows go."""

    registry: chips.ChipRegistry
    chip: chips.Chip | None  # None: an accelerator we have no figures for, gates not asked for
    platform: str
    device_kind: str
    records_path: Path
    root: Path

    @property
    def on_accelerator(self) -> bool:
        return self.platform in rec.ACCELERATORS

    def run_for(self, *, gate: int, chapter: str, test_id: str, timer_factory,
                marker_cost: Cost | None = None, interpreted: bool = True, graded: str = "") -> GateRun:
        if self.chip is None:
            raise pytest.UsageError(f"{test_id}: no chip for gate records: pass --chip")
        return GateRun(gate=gate, chapter=chapter, test_id=test_id, chip=self.chip,
                       on_accelerator=self.on_accelerator,
                       provenance=provenance(self.platform, self.device_kind, self.root),
                       records_path=self.records_path, timer_factory=timer_factory,
                       marker_cost=marker_cost, interpreted=interpreted, graded=graded)


def gate_context(registry: chips.ChipRegistry, requested: str | None, platform: str, device_kind: str,
                 records_path: Path, root: Path, *, strict: bool) -> GateContext:
    """Resolve the run's chip. strict: a chip that cannot be named for this device is an error."""
    try:
        name = chips.chip_for_run(requested, platform, device_kind, registry)
    except chips.ChipMismatch:
        if strict:
            raise
        name = None
    if name is None and platform == "cpu":
        name = chips.DEFAULT_CHIP
    return GateContext(registry=registry, chip=registry.get(name) if name else None, platform=platform,
                       device_kind=device_kind, records_path=records_path, root=root)
