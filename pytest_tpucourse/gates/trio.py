"""A kernel between the XLA floor and the public ceiling, timed in the same rounds and judged by
the gate's speed criteria from its round-by-round ratios (GateRun.measure_trio)."""

from __future__ import annotations

import uuid

from ..core.outcomes import RAISED_BY_GRADED_CODE
from ..roofline import Cost, predict
from . import ceiling_sweep, device_ops, judge, stats, sweeps, timer
from . import criteria as gate_criteria
from . import records as rec
from .results import GateResult, interval_text
from .sampling import (ALL_ROTATING, INPUT_SETS, WEIGHTS_FIXED, chip_peak, compile_ahead, compiled, compiled_text,
                       draw_seeds,
                       mxu_fields, timed_fields, weights_fixed, wrong_output)


def measure(run, criteria, op: str, shapes, dtype: str, cost: Cost | None, *, floor, kernel, ceiling, inputs,
            tpu_only=("kernel", "ceiling"), weights=(), one_custom_call=(), also=None) -> GateResult:
    """Time floor (XLA), kernel and ceiling in the same rounds; judge the kernel by `criteria`.

    criteria: a speed criterion id of this gate, or several, each judged from the kernel's
    round-by-round ratios to the floor or the ceiling (Criterion.ratio_of). ceiling: a
    function, or {label: function} candidates (a block-size sweep) of which the fastest
    correct one on this chip is the ceiling. kernel or ceiling None, or named in tpu_only
    off a TPU, is not runnable here: a not-runnable row is written, never a pass.
    inputs(seed) builds one input set: operands for all three, from seeds drawn when the
    measurement starts (sampling.draw_seeds).
    weights: the operand indices that are a model's weights: XLA is then also timed with them
    fixed (one array throughout, the others rotating), and the floor is the faster regime.
    one_custom_call: the implementations ("ceiling", "floor") that must time as one custom
    call (device_ops.py): another op in their breakdown fails the measurement, naming it.
    also: {label: function} further XLA programs timed in the same rounds, said on the floor's
    row (gate 01: XLA's fused program beside the unfused sequence), never judged.
    A kernel time below the chip's roofline floor for `cost` is refused as impossible.
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
    users = {"kernel": judged, "ceiling": [c for c in judged if c.ratio_of == "ceiling"], "floor": judged}

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
        seeds = draw_seeds(INPUT_SETS)
        input_sets = [inputs(seed) for seed in seeds]
        common["input_seeds"] = tuple(seeds)
        # XLA's floor and the ceiling (a kept choice of a searched space) compile in threads while the
        # learner's kernel is checked and compiled here
        ahead = compile_ahead({"floor": floor, "ceiling": ceiling_sweep.ahead(
            run, fns.get("ceiling"), ceiling_sweep.key(run, op, shapes, dtype)), **(also or {})}, input_sets[0])
        if "kernel" in fns:
            found = run._not_own_work([run._timed_kernel_work(fns["kernel"], input_sets[0], cost)])
            if found:
                for c in users["kernel"]:
                    rows.append(run._record(criterion=c.id, implementation="kernel", statistic=rec.OWN_WORK,
                                            value=0.0, unit="check", verdict="fail",
                                            notes="; ".join(found), **common))
                return run._finish(_result(run, op, dtype, shapes, found, rows, judged))
            refused = run._refused_at_gate_size(fns["kernel"], input_sets[0])
            if refused:  # what the chip would refuse before timing anything: no row, the test fails
                return run._finish(GateResult(gate_criteria.FAIL, refused, tuple(rows)))
            _first_call(fns["kernel"], input_sets[0])  # compiled here while the floor and ceiling compile
        compiled(ahead, "floor")
        expected = [floor(*args) for args in input_sets]
        compiled(ahead)
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
        timed = dict(fns)
        if weights:
            timed[FIXED_FLOOR] = weights_fixed(floor, input_sets[0], weights)
        timed.update(also or {})
        try:
            timings = run.harness.measure(timed, input_sets)
        except timer.ImplementationFailed as failure:
            check_failed(failure.name if failure.name in users else "floor", f"while timing: {failure}")
            return run._finish(_result(run, op, dtype, shapes, problems, rows, judged))
        fresh = draw_seeds(1)[0]
        fresh_inputs = [inputs(fresh)]
        fresh_expected = [floor(*fresh_inputs[0])]
        for name in [n for n in ("kernel", "ceiling") if n in fns]:
            wrong = wrong_output(name, fns[name], input_sets, expected, dtype)
            where = f"on the timed inputs (seeds {', '.join(map(str, seeds))})"
            if not wrong:
                wrong = wrong_output(name, fns[name], fresh_inputs, fresh_expected, dtype)
                where = f"on inputs of seed {fresh}"
            if wrong:
                check_failed(name, f"after timing, {where}: {wrong}")
                del timings[name]
        # the compiled programs the rows read (each a compile more): XLA's where it was timed in two
        # regimes on the chip (its prefetch), and each declared one-custom-call implementation whose
        # trace gave a per-op breakdown (its ops' kinds)
        wanted = {n for n in one_custom_call if n in timings and getattr(timings[n], "ops", ())}
        wanted |= {"floor"} if weights and run.device.is_accelerator and run.rehearsal is None else set()
        texts = {name: compiled_text(fns[name], input_sets[0]) for name in wanted}
        known = {name: device_ops.hlo_kinds(text) for name, text in texts.items() if text}
        regime, floor_notes = _floor_regime(
            timings, bool(texts.get("floor")) and device_ops.cross_program_prefetch(texts["floor"]))
        floor_notes += [f"{label} (timed in the same rounds): {timings[label].summary.median * 1e6:.1f} us, "
                        f"{stats.median(stats.paired_ratios(timings[label].samples, timings['floor'].samples)):.3f}x "
                        f"the floor" for label in (also or {})]
        for name in [n for n in one_custom_call if n in timings]:
            extra = device_ops.beside_one_custom_call(device_ops.as_row(timings[name].ops, known.get(name)))
            if extra:
                check_failed(name, f"{name} not timed as its model-code form: {extra}")
                del timings[name]
        impossible = _below_roofline(run, timings.get("kernel"), cost, dtype)
        if impossible:
            for c in users["kernel"]:
                rows.append(run._record(criterion=c.id, implementation="kernel", statistic=rec.BELOW_ROOFLINE,
                                        value=0.0, unit="check", verdict="fail", notes=impossible, **common))
            problems.append(impossible)
            del timings["kernel"]
        for name, timing in timings.items():
            run.store.store(None if name == "kernel" else name, timing)
        if "floor" in timings:
            rows += _rows(run, judged, timings, common, sweep_notes, (regime, floor_notes), cost, known)
    except rec.HonestyError as error:
        return run._finish(GateResult(gate_criteria.FAIL, str(error), tuple(rows)))
    return run._finish(_result(run, op, dtype, shapes, problems, rows, judged, floor_notes))


def _rows(run, judged, timings, common, sweep_notes: str, floor_said: tuple[str, list[str]],
          cost: Cost, known: dict) -> list[rec.Record]:
    rows = []
    regime, floor_notes = floor_said
    floor = timings["floor"].samples
    ceiling = timings["ceiling"].samples if "ceiling" in timings else None
    said = {name: _said(run, timings[name], cost, common["dtype"], known.get(name))
            for name in ("floor", "kernel", "ceiling") if name in timings}
    said["floor"]["xla_regime"] = regime
    for c in judged:
        for name in ("floor", "ceiling"):
            if name not in timings or (name == "ceiling" and c.ratio_of != "ceiling"):
                continue
            t = timings[name]
            to_floor = stats.median(stats.paired_ratios(t.samples, floor))
            # The sweep first: a row's notes are cut at 1000 characters, and its choice must survive.
            extra = floor_notes if name == "floor" else []
            first = [sweep_notes] if name == "ceiling" and sweep_notes else []
            notes = "; ".join([*first, t.describe(), *_op_notes(said[name], t), *extra])
            rows.append(run._record(criterion=c.id, implementation=name, statistic="median",
                                    value=t.summary.median, unit="s", spread=t.summary.iqr,
                                    samples=t.samples, ratio_to_floor=to_floor, verdict="reference",
                                    notes=notes, **said[name], **common))
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
                                ratio_ci=verdict.interval, verdict=verdict.verdict,
                                notes="; ".join([t.describe(), *_op_notes(said["kernel"], t)]), **said["kernel"],
                                **common))
    return rows


def _first_call(kernel, args) -> None:
    """The learner's kernel called once, untimed and unchecked: its compile, on this thread and under
    the run's own rules, overlaps the threads compiling XLA's floor and the ceiling. What it raises
    is said by the check that calls it again (sampling.wrong_output)."""
    import jax

    try:
        jax.block_until_ready(kernel(*args))
    except RAISED_BY_GRADED_CODE:
        pass


FIXED_FLOOR = "floor-weights-fixed"  # XLA timed with the weights fixed, beside the floor timed all rotating


def _floor_regime(timings: dict, prefetch: bool | None) -> tuple[str, list[str]]:
    """The floor's input regime, and notes: where XLA was timed both ways (weights fixed, all
    rotating), timings["floor"] becomes the faster and the notes say both times; XLA's prefetch
    where its compiled program has one."""
    regime, notes = ALL_ROTATING, []
    fixed = timings.pop(FIXED_FLOOR, None)
    if fixed is not None and "floor" in timings:
        rotating = timings["floor"]
        if fixed.summary.median < rotating.summary.median:
            regime, timings["floor"] = WEIGHTS_FIXED, fixed
        notes.append(f"XLA timed in both regimes: weights fixed {fixed.summary.median * 1e6:.1f} us, all inputs "
                     f"rotating {rotating.summary.median * 1e6:.1f} us; judged against the faster, {regime}")
    if prefetch:
        notes.append("XLA's compiled program starts with a cross-program prefetch (an operand copied into VMEM "
                     "before its body: a later call with that operand unchanged finds it there)")
    return regime, notes


def _said(run, timing, cost: Cost, dtype: str, known: dict | None) -> dict:
    """A timed row's own fields: how it was timed (sampling.timed_fields) and its MXU utilisation."""
    return {**timed_fields(timing, known),
            "mxu": mxu_fields(cost.flops, timing.summary.median, chip_peak(run.chip, dtype))}


def _op_notes(said: dict, timing) -> list[str]:
    """What a row's notes say of the programs and ops its calls ran, and its MXU utilisation."""
    notes = []
    programs = getattr(timing, "programs", ())
    if programs:
        notes.append(f"XLA programs per call: {', '.join(programs)}")
    if said.get("ops"):
        notes.append(f"per-op device time per call: {device_ops.describe(said['ops'])}")
    mxu = said.get("mxu")
    if mxu and mxu["utilisation"] is not None:
        notes.append(f"MXU {mxu['utilisation']:.0%} of the chip's peak at the op's {mxu['model_flops']:.3g} model FLOPs")
    return notes


def _below_roofline(run, timing, cost: Cost, dtype: str) -> str | None:
    """Why a kernel time is impossible on this chip (faster than its roofline floor), or None."""
    if timing is None:
        return None
    floor = predict(run.chip.per_device(), cost, dtype).floor_seconds
    median = timing.summary.median
    if median >= floor:
        return None
    return (f"kernel time refused as impossible: {median * 1e6:.2f} us is below the roofline floor of "
            f"{run.chip.name} for this op ({floor * 1e6:.2f} us: {cost.flops:.3g} FLOPs, {cost.bytes:.3g} HBM "
            f"bytes): no kernel does the op that fast, so its timed calls did not do the op")


def _result(run, op, dtype, shapes, problems, rows, judged, xla_notes=()) -> GateResult:
    """The measurement's result; a pass says what the floor's row says of XLA (`xla_notes`: its
    regimes, its prefetch, the further XLA programs timed beside it)."""
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
    return GateResult(gate_criteria.PASS, "; ".join([f"{where}: {passed}", *xla_notes]), tuple(rows), timed=True)
