"""Gate 0: XLA's op timed on the chip and judged against its roofline floor (GateRun.measure_floor)."""

from __future__ import annotations

import uuid

from ..roofline import Cost, predict
from . import criteria as gate_criteria
from . import judge, timer
from . import records as rec
from .results import GateResult, interval_text
from .sampling import INPUT_SETS, chip_peak, draw_seeds, mxu_fields, timed_fields


def measure(run, criterion: str, op: str, shapes, dtype: str, cost: Cost | None, fn,
            inputs) -> GateResult:
    """Gate 0: time XLA's op and judge it against its roofline floor on this chip.

    inputs(seed) builds one input set; it is called only when something is timed, with seeds
    drawn when the measurement starts (sampling.draw_seeds).
    """
    c = run.gate.criterion(criterion)
    if c.ratio_of != "roofline":
        raise ValueError(f"gate {run.gate.number:02d} criterion {c.id} is not judged against a roofline floor")
    cost = run._cost(cost)
    run.predict(criterion, op, shapes, dtype, cost)
    waiting = run._why_nothing_is_timed(op, dtype, "roofline floor")
    if waiting:
        return run._finish(waiting)
    run.store.require()
    floor = predict(run.chip.per_device(), cost, dtype).floor_seconds
    seeds = draw_seeds(INPUT_SETS)
    try:
        timing = run.harness.measure({"floor": fn}, [inputs(seed) for seed in seeds])["floor"]
    except timer.TimingError as error:
        return run._finish(GateResult(gate_criteria.FAIL, f"{op} on {run.chip.name}: {error}"))
    judged = judge.judge_ratios([s / floor for s in timing.samples], c.ratio_range)
    s = timing.summary
    try:
        row = run._record(criterion=criterion, implementation="floor", op=op, shapes=shapes, dtype=dtype,
                          method="measured", statistic="median", value=s.median, unit="s", spread=s.iqr,
                          samples=timing.samples, ratio_to_floor=judged.median, ratio_ci=judged.interval,
                          verdict=judged.verdict, interpret=False, cost=run._slot_cost(cost),
                          run_id=uuid.uuid4().hex, notes=timing.describe(), input_seeds=tuple(seeds),
                          mxu=mxu_fields(cost.flops, s.median, chip_peak(run.chip, dtype)), **timed_fields(timing))
    except rec.HonestyError as error:
        return run._finish(GateResult(gate_criteria.FAIL, str(error)))
    run.store.store(None, timing)
    low, high = c.ratio_range
    message = (f"{op} {dtype} {list(map(tuple, shapes))} on {run.chip.name}: measured {s.median * 1e6:.1f} us "
               f"is {judged.median:.2f}x its roofline floor {floor * 1e6:.1f} us (95% interval "
               f"{interval_text(judged.interval)}); the band is [{low}, {high}]")
    return run._finish(GateResult(judged.verdict, message, (row,), timed=True))
