"""Gate 04's multi-device work: a distributed kernel against its own compute alone
(GateRun.measure_against_compute_alone), and where a check needing several devices runs
(GateRun.has_devices, GateRun.devices); fewer chips than it needs is "not runnable", never a pass."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid

from ..roofline import Cost, predict
from . import criteria as gate_criteria
from . import device_ops, judge, placement, stats, timer
from . import records as rec
from .results import GateResult, interval_text
from .sampling import INPUT_SETS, compiled_text, draw_seeds, measure_apart, timed_fields, wrong_output


def has_devices(run, criterion: str, op: str, shapes, dtype: str, count: int) -> bool:
    """False, with a not-runnable row ("needs N chips"), on an accelerator with fewer than `count`
    devices. Off an accelerator True: simulated devices stand in."""
    run.gate.criterion(criterion)
    have = run.device.device_count
    if not run.on_accelerator or have >= count:
        return True
    why = placement.too_few_chips(count, have, run.device.device_kind)
    row = _too_few_chips_row(run, criterion, op, shapes, dtype, uuid.uuid4().hex, f"not runnable here: {why}")
    run._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"{op} on {run.chip.name}: {why}; recorded as "
                                                       f"not runnable", (row,)))
    return False


def _too_few_chips_row(run, criterion, op, shapes, dtype, run_id: str, notes: str) -> rec.Record:
    return run._record(criterion=criterion, implementation="kernel", op=op, shapes=shapes, dtype=dtype,
                       method="measured", statistic=placement.TOO_FEW_CHIPS, value=None, unit="s",
                       verdict="not-runnable", interpret=False, run_id=run_id, notes=notes)


@contextlib.contextmanager
def devices(run, criterion: str, op: str, shapes, dtype: str, count: int):
    """The devices a correctness check needing `count` devices builds its mesh from, in force for the
    block, or None (a not-runnable row written) when it cannot run here.

    On an accelerator with enough devices: the chip's. With fewer chips than `count`: `count`
    simulated CPU devices under TPU interpret mode, and `verify` inside the block writes an
    off-chip-verified row saying why. Off an accelerator: the run's own simulated devices (the
    test is skipped, as the mesh fixture skips, when --cpu-devices gave fewer).
    """
    where = placement.placement(on_accelerator=run.on_accelerator, chips=run.device.device_count,
                                device_kind=run.device.device_kind, cpu_devices=placement.cpu_device_count(),
                                count=count)
    if where.where == placement.NOWHERE:
        run.gate.criterion(criterion)
        row = _too_few_chips_row(run, criterion, op, shapes, dtype, uuid.uuid4().hex,
                                 f"not runnable here: {where.why}")
        run._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"{op} on {run.chip.name}: {where.why}; "
                                                           f"recorded as not runnable", (row,)))
        yield None
        return
    if where.where == placement.RUN_DEVICES and run.device.device_count < count:
        import pytest  # as the mesh fixture does: a CPU run asked for fewer simulated devices

        pytest.skip(f"needs {count} devices; this run has {run.device.device_count} CPU device(s) "
                    f"(--cpu-devices)")
    run._off_chip_because = where.why if where.where == placement.ON_CPU_DEVICES else None
    try:
        with placement.devices(where) as found:
            yield found
    finally:
        run._off_chip_because = None


def alone_judgement(c, samples, floor: float) -> judge.RatioJudgement | None:
    """The compute alone's time over its roofline floor, judged by the criterion's alone_range (None: none)."""
    if c.alone_range is None:
        return None
    return judge.judge_ratios([s / floor for s in samples], c.alone_range)


def measure(run, criterion: str, op: str, shapes, dtype: str, cost: Cost | None, *, kernel, compute_alone,
            kernel_inputs, compute_alone_inputs, kernel_reference, compute_alone_reference, devices: int,
            schedule_check=None) -> GateResult:
    """Gate 04: time a distributed kernel on `devices` chips and its compute alone; judge the ratio.

    compute_alone: the same work per chip with no communication at all. Each is checked
    against its XLA reference before and after timing; both are timed in the same rounds.
    kernel_inputs(seed), compute_alone_inputs(seed) build one input set each. On a CPU the
    roofline floor of one chip's compute is predicted. With fewer than `devices` chips the
    compute alone is still timed on one chip (when given), and the kernel is recorded as not
    runnable ("needs N chips"), never a pass.

    The compute alone must itself run near its roofline floor (the criterion's alone_range): a slow
    one would hide exposed communication in the ratio. schedule_check(): checks that the kernel's
    program overlaps compute with communication, run before timing wherever the kernel is built (on
    4 chips and in a rehearsal); when it raises (ir.assert_compute_overlaps_communication's
    WrongResult), a fail row saying why, and nothing is timed.
    """
    c = run.gate.criterion(criterion)
    if c.kind != "speed" or c.ratio_of != "compute-alone":
        raise ValueError(f"gate {run.gate.number:02d} criterion {c.id} is not judged against a "
                         f"compute-alone time")
    cost = run._cost(cost)
    run.predict(criterion, op, shapes, dtype, cost, implementation="compute-alone")
    waiting = run._why_nothing_is_timed(op, dtype, "roofline floor of one chip's compute")
    if waiting:
        return run._finish(waiting)
    have = run.device.device_count
    if have < devices and (compute_alone is None or run.platform != "tpu"):
        has_devices(run, criterion, op, shapes, dtype, devices)
        return run.results[-1]
    run_id = uuid.uuid4().hex
    common = dict(criterion=criterion, op=op, shapes=shapes, dtype=dtype, method="measured",
                  interpret=False, run_id=run_id)
    if run.platform != "tpu":
        row = run._record(implementation="kernel", statistic="median", value=None, unit="s",
                          verdict="not-runnable", notes=f"not runnable here: a TPU Pallas kernel cannot "
                                                        f"run on {run.device.device_kind}", **common)
        return run._finish(GateResult(gate_criteria.NOT_RUNNABLE, f"a TPU Pallas kernel cannot run on "
                                      f"{run.device.device_kind}: recorded as not runnable", (row,)))
    run.store.require()
    both = {"kernel": (kernel, kernel_inputs, kernel_reference),
            "compute-alone": (compute_alone, compute_alone_inputs, compute_alone_reference)}
    if have < devices:  # the compute alone on the one chip; the ring needs chips this run has not
        del both["kernel"]
    try:
        seeds = draw_seeds(INPUT_SETS)
        sets = {name: [build(seed) for seed in seeds] for name, (_, build, _) in both.items()}
        common["input_seeds"] = tuple(seeds)
        found = run._not_own_work([run._timed_kernel_work(fn, sets[name][0], cost, f"the timed {name}")
                                   for name, (fn, _, _) in both.items()])
        if found:
            row = run._record(implementation="kernel", statistic=rec.OWN_WORK, value=0.0, unit="check",
                              verdict="fail", notes="; ".join(found), **common)
            return run._finish(GateResult(gate_criteria.FAIL, "; ".join(found), (row,)))
        for name, (fn, _, reference) in both.items():
            wrong = wrong_output(name, fn, sets[name], [reference(*a) for a in sets[name]], dtype)
            if wrong:
                return run._finish(_check_failure(run, name, f"before timing: {wrong}", common))
        unhidden = _unhidden(schedule_check) if schedule_check is not None and "kernel" in both else None
        if unhidden:
            return run._finish(_check_failure(run, "kernel", f"before timing: {unhidden}", common,
                                              statistic=rec.SCHEDULE_CHECK))
        try:
            timings = measure_apart(run.harness, {name: both[name][0] for name in both}, sets)
        except timer.ImplementationFailed as failure:
            return run._finish(_check_failure(run, failure.name, f"while timing: {failure}", common))
        fresh = draw_seeds(1)[0]
        for name, (fn, build, reference) in both.items():
            args = build(fresh)
            wrong = wrong_output(name, fn, [args], [reference(*args)], dtype)
            if wrong:
                return run._finish(_check_failure(run, name, f"after timing, on inputs of seed {fresh}: "
                                                                 f"{wrong}", common))
        boundary = {}
        for name, (fn, _, _) in both.items():  # the program's copy of its result out of VMEM is not the kernel's
            timings[name], boundary[name] = without_result_copies(timings[name], compiled_text(fn, sets[name][0]))
        alone = timings["compute-alone"]
        for name, t in timings.items():
            run.store.store(None if name == "kernel" else name, t)
        floor = predict(run.chip.per_device(), cost, dtype).floor_seconds
        near = alone_judgement(c, alone.samples, floor)
        alone_row = run._record(implementation="compute-alone", statistic="median", value=alone.summary.median,
                                unit="s", spread=alone.summary.iqr, samples=alone.samples, verdict="reference",
                                cost=run._slot_cost(cost),
                                ratio_to_floor=None if near is None else near.median,
                                ratio_ci=None if near is None else near.interval,
                                notes=f"one chip, no communication; {boundary['compute-alone']}"
                                      f"{_near_words(c, near)}; {alone.describe()}",
                                **timed_fields(alone), **common)
        if "kernel" not in timings:
            return run._finish(_compute_alone_only(run, c, devices, alone, alone_row, common, near))
        mine = timings["kernel"]
        verdict = judge.judge_ratios(stats.paired_ratios(mine.samples, alone.samples), c.ratio_range)
        if near is not None and near.verdict != gate_criteria.PASS:
            verdict = judge.RatioJudgement(verdict.median, verdict.interval, gate_criteria.FAIL)
        rows = (alone_row,
                run._record(implementation="kernel", statistic="median", value=mine.summary.median, unit="s",
                            spread=mine.summary.iqr, samples=mine.samples,
                            ratio_to_compute_alone=verdict.median, ratio_ci=verdict.interval,
                            verdict=verdict.verdict, notes=f"{devices} chips; {boundary['kernel']}{mine.describe()}",
                            **timed_fields(mine), **common))
    except rec.HonestyError as error:
        return run._finish(GateResult(gate_criteria.FAIL, str(error)))
    low, high = c.ratio_range
    message = (f"{op} {dtype} {list(map(tuple, shapes))} on {devices} {run.chip.name} chips: "
               f"{mine.summary.median * 1e6:.1f} us is {verdict.median:.2f}x its compute alone "
               f"({alone.summary.median * 1e6:.1f} us; 95% interval {interval_text(verdict.interval)}); "
               f"the range is [{low}, {high}]; {_near_words(c, near)}")
    return run._finish(GateResult(verdict.verdict, message, rows, timed=True))


def without_result_copies(timing, hlo_text: str | None) -> tuple:
    """(timing, note): the timing's samples less, sample by sample, the copies its program makes of a
    kernel's result out of VMEM because it returns that result (device_ops.result_copies): XLA's, at the
    program's boundary, run by no model code that consumes the result. The per-op breakdown still shows
    them. The timing unchanged where its program makes none, or where the trace gave no ops per sample
    (the note then says the copy is in the time). The note ends with "; " where it says anything."""
    copies = device_ops.result_copies(hlo_text)
    if not copies:
        return timing, ""
    names = ", ".join(sorted(copies))
    per_sample = [sum(seconds for op, (_, seconds) in ops.items() if device_ops.instruction_name(op) in copies)
                  for ops in timing.sample_ops]
    if len(per_sample) != len(timing.samples) or not all(per_sample):
        return timing, (f"the time includes XLA's copy of the kernel's result out of VMEM ({names}): the trace "
                        f"did not give it in every sample; ")
    samples = tuple(s - copy for s, copy in zip(timing.samples, per_sample))
    if not all(s > 0 for s in samples):
        return timing, f"the time includes XLA's copy of the kernel's result out of VMEM ({names}); "
    return dataclasses.replace(timing, samples=samples), (
        f"samples less XLA's copy of the kernel's result out of VMEM as the program's result ({names}, "
        f"{stats.median(per_sample) * 1e6:.1f} us a call, in the per-op breakdown): a program that consumes "
        f"the result reads it in VMEM and runs no such copy; ")


def _unhidden(schedule_check) -> str | None:
    """Why the kernel's schedule hides no communication (what its check raised), or None."""
    from ..core.outcomes import WrongResult

    try:
        schedule_check()
    except WrongResult as error:
        return str(error)
    return None


def _near_words(c, near) -> str:
    """The compute alone against its floor, in words: the ratio, its interval and the range it must lie in."""
    if near is None:
        return "compute alone not judged against its floor"
    within = "within" if near.verdict == gate_criteria.PASS else "NOT within"
    return (f"compute alone {near.median:.2f}x its roofline floor (95% interval {interval_text(near.interval)}), "
            f"{within} [{c.alone_range[0]}, {c.alone_range[1]}]")


def _compute_alone_only(run, c, devices: int, alone, alone_row, common, near=None) -> GateResult:
    """Too few chips for the kernel: its compute alone was timed on one chip; the kernel is not runnable."""
    short = placement.too_few_chips(devices, run.device.device_count, run.device.device_kind)
    kernel_row = _too_few_chips_row(
        run, c.id, common["op"], common["shapes"], common["dtype"], common["run_id"],
        f"not runnable here: {short}; its compute alone measured on one chip "
        f"({alone.summary.median * 1e6:.1f} us), the communication checked off-chip by the correctness criterion")
    message = (f"not runnable on {_chips_word(run.device.device_count)} (needs {devices} chips): compute alone "
               f"measured, {alone.summary.median * 1e6:.1f} us on one {run.chip.name} chip; the collective "
               f"{common['op']} is timed on {devices} chips; {_near_words(c, near)}")
    return GateResult(gate_criteria.NOT_RUNNABLE, message, (alone_row, kernel_row))


def _check_failure(run, name: str, message: str, common: dict, statistic: str = rec.TIMED_OUTPUT_CHECK) -> GateResult:
    row = run._record(implementation=name, statistic=statistic, value=0.0, unit="check",
                      verdict="fail", notes=message, **common)
    return GateResult(gate_criteria.FAIL, message, (row,))



def _chips_word(count: int) -> str:
    return "one chip" if count == 1 else f"{count} chips"

