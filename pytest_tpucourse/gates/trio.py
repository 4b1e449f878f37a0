"""A kernel between the XLA floor and the public ceiling, timed in the same rounds and judged by
the gate's speed criteria from its round-by-round ratios (GateRun.measure_trio)."""

from __future__ import annotations

import uuid

from ..roofline import Cost
from . import criteria as gate_criteria
from . import judge, stats, timer
from . import records as rec
from . import ceiling_sweep, sweeps
from .results import GateResult, interval_text
from .sampling import INPUT_SETS, timed_fields, wrong_output


def measure(run, criteria, op: str, shapes, dtype: str, cost: Cost | None, *, floor, kernel, ceiling, inputs,
            tpu_only=("kernel", "ceiling")) -> GateResult:
    """Time floor (XLA), kernel and ceiling in the same rounds; judge the kernel by `criteria`.

    criteria: a speed criterion id of this gate, or several, each judged from the kernel's
    round-by-round ratios to the floor or the ceiling (Criterion.ratio_of). ceiling: a
    function, or {label: function} candidates (a block-size sweep) of which the fastest
    correct one on this chip is the ceiling. kernel or ceiling None, or named in tpu_only
    off a TPU, is not runnable here: a not-runnable row is written, never a pass.
    inputs(seed) builds one input set: operands for all three.
    """
    criteria = (criteria,) if isinstance(criteria, str) else tuple(criteria)
    judged = [run.gate.criterion(c) for c in criteria]
    for c in judged:
        if c.kind != "speed" or c.ratio_of not in ("floor", "ceiling"):
            raise ValueError(f"gate {run.gate.number:02d} criterion {c.id} is not judged against "
                             f"a measured floor or ceiling")
        if c.ratio_of == "ceiling" and not ceiling:
            raise ValueError(f"gate {run.gate.number:02d} criterion {c.id} needs a ceiling kernel")
    if floor is None:
        raise ValueError(f"{run.test_id}: measure_trio needs the XLA floor implementation")
    cost = run._cost(cost)
    for c in judged:
        run.predict(c.id, op, shapes, dtype, cost)
    waiting = run._why_nothing_is_timed(op, dtype, "roofline floor")
    if waiting:
        return run._finish(waiting)
    run.store.require()

    run_id = uuid.uuid4().hex
    common = dict(op=op, shapes=shapes, dtype=dtype, method="measured", interpret=False, run_id=run_id)
    rows, problems = [], []
    users = {"kernel": judged, "ceiling": [c for c in judged if c.ratio_of == "ceiling"]}

    def not_runnable(name: str, why: str) -> None:
        for c in users[name]:
            rows.append(run._record(criterion=c.id, implementation=name, statistic="median", value=None,
                                    unit="s", verdict="not-runnable", notes=f"not runnable here: {why}",
                                    **common))

    def check_failed(name: str, message: str) -> None:
        for c in users[name]:
            rows.append(run._record(criterion=c.id, implementation=name, statistic=rec.TIMED_OUTPUT_CHECK,
                                    value=0.0, unit="check", verdict="fail", notes=message, **common))
        problems.append(message)

    fns = {"floor": floor}
    for name, fn in (("kernel", kernel), ("ceiling", ceiling)):
        if name == "ceiling" and not users["ceiling"]:
            continue
        if fn is None or (name in tpu_only and run.platform != "tpu"):
            not_runnable(name, "not given" if fn is None
                         else f"a TPU Pallas kernel cannot run on {run.device.device_kind}")
        else:
            fns[name] = fn
    try:
        input_sets = [inputs(seed) for seed in range(INPUT_SETS)]
        if "kernel" in fns:
            found = run._not_own_work([run._timed_kernel_work(fns["kernel"], input_sets[0], cost)])
            if found:
                for c in users["kernel"]:
                    rows.append(run._record(criterion=c.id, implementation="kernel", statistic=rec.OWN_WORK,
                                            value=0.0, unit="check", verdict="fail",
                                            notes="; ".join(found), **common))
                return run._finish(_result(run, op, dtype, shapes, found, rows, judged))
        expected = [floor(*args) for args in input_sets]
        sweep_notes = ""
        if isinstance(fns.get("ceiling"), (dict, sweeps.Space)):
            fns["ceiling"], sweep_notes = ceiling_sweep.tune(run, fns["ceiling"], input_sets, expected, dtype,
                                                             ceiling_sweep.key(run, op, shapes, dtype))
            if fns["ceiling"] is None:
                check_failed("ceiling", f"no ceiling candidate was correct: {sweep_notes}")
                del fns["ceiling"]
        for name in [n for n in ("kernel", "ceiling") if n in fns]:
            wrong = wrong_output(name, fns[name], input_sets, expected, dtype)
            if wrong:
                check_failed(name, f"before timing: {wrong}")
                del fns[name]
        if problems:  # a wrong kernel or ceiling: its fail row stands and nothing is timed
            return run._finish(_result(run, op, dtype, shapes, problems, rows, judged))
        # A kernel that cannot run here still leaves XLA's floor (and the ceiling) worth timing:
        # they are references on this chip, and the kernel's row says it is not runnable.
        try:
            timings = run.harness.measure(fns, input_sets)
        except timer.ImplementationFailed as failure:
            check_failed(failure.name if failure.name in users else "kernel", f"while timing: {failure}")
            return run._finish(_result(run, op, dtype, shapes, problems, rows, judged))
        fresh = int(run_id[:8], 16)
        fresh_inputs = [inputs(fresh)]
        fresh_expected = [floor(*fresh_inputs[0])]
        for name in [n for n in ("kernel", "ceiling") if n in fns]:
            wrong = wrong_output(name, fns[name], fresh_inputs, fresh_expected, dtype)
            if wrong:
                check_failed(name, f"after timing, on inputs of seed {fresh}: {wrong}")
                del timings[name]
        for name, timing in timings.items():
            run.store.store(None if name == "kernel" else name, timing)
        rows += _rows(run, judged, timings, common, sweep_notes)
    except rec.HonestyError as error:
        return run._finish(GateResult(gate_criteria.FAIL, str(error), tuple(rows)))
    return run._finish(_result(run, op, dtype, shapes, problems, rows, judged))


def _rows(run, judged, timings, common, sweep_notes: str) -> list[rec.Record]:
    rows = []
    floor = timings["floor"].samples
    ceiling = timings["ceiling"].samples if "ceiling" in timings else None
    for c in judged:
        for name in ("floor", "ceiling"):
            if name not in timings or (name == "ceiling" and c.ratio_of != "ceiling"):
                continue
            t = timings[name]
            to_floor = stats.median(stats.paired_ratios(t.samples, floor))
            # The sweep first: a row's notes are cut at 1000 characters, and its choice must survive.
            notes = (f"{sweep_notes}; " if name == "ceiling" and sweep_notes else "") + t.describe()
            rows.append(run._record(criterion=c.id, implementation=name, statistic="median",
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
        rows.append(run._record(criterion=c.id, implementation="kernel", statistic="median",
                                value=t.summary.median, unit="s", spread=t.summary.iqr, samples=t.samples,
                                ratio_to_floor=to["floor"], ratio_to_ceiling=to.get("ceiling"),
                                ratio_ci=verdict.interval, verdict=verdict.verdict, notes=t.describe(),
                                **timed_fields(t), **common))
    return rows


def _result(run, op, dtype, shapes, problems, rows, judged) -> GateResult:
    where = f"{op} {dtype} {list(map(tuple, shapes))} on {run.chip.name}"
    failures = list(problems)
    for r in rows:
        if r.implementation == "kernel" and r.verdict == "fail" and r.statistic == "median":
            c = run.gate.criterion(r.criterion)
            ratio = r.ratio_to_floor if c.ratio_of == "floor" else r.ratio_to_ceiling
            failures.append(f"{c.id}: kernel {r.value * 1e6:.1f} us is {ratio:.2f}x the {c.ratio_of} (95% "
                            f"interval {interval_text(r.ratio_ci)}), not inside [{c.ratio_range[0]}, "
                            f"{c.ratio_range[1]:.3g}]")
    if failures:
        return GateResult(gate_criteria.FAIL, f"{where}: " + "; ".join(dict.fromkeys(failures)), tuple(rows),
                          timed=not problems)
    blocked = [r for r in rows if r.verdict == "not-runnable"]
    if blocked:
        timed = sorted({r.implementation for r in rows if r.statistic == "median" and r.value is not None})
        return GateResult(gate_criteria.NOT_RUNNABLE,
                          f"{'kernel' if any(r.implementation == 'kernel' for r in blocked) else 'ceiling'} "
                          f"not runnable on {run.device.device_kind} ({run.chip.name}): recorded as not "
                          f"runnable; measured: {' and '.join(timed) or 'nothing'}", tuple(rows))
    passed = ", ".join(f"{c.id} pass" for c in judged)
    return GateResult(gate_criteria.PASS, f"{where}: {passed}", tuple(rows), timed=True)
