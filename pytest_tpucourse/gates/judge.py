"""Judging rows: the verdict of a measurement, every row re-judged when it is read, and statuses.

A row is never taken at its word. On read, `judge_rows` recomputes what a row could only
have got from its measurement and rejects the row (with its path and line) when they
disagree:
  - a measured row names a device kind that is the row's chip;
  - a timed row carries its raw samples, at least stats.MIN_ROUNDS of them, and its median and
    interquartile range are theirs;
  - a time read from the profiler's device trace carries the host's wall time per call of the
    same samples, and its dispatch_bound flag is what that wall time and its median give
    (`dispatch_bound`); a row of schema 2 predates the method and is read as wall-calls;
  - a kernel row's ratios are recomputed round by round from its own samples and those of
    the reference rows timed in the same run (same run_id), and its verdict from the
    ratio's confidence interval and the gate's thresholds;
  - gate 00's floor rows are judged against the roofline floor their cost gives on the chip;
  - a prediction is the floor its cost gives on the chip;
  - a rehearsal row (`pytest --gates --rehearse`, a stand-in clock) never counts: it is
    rejected, except by the rehearsal itself, which re-judges its own rows as these rules
    judge a chip's (the device kind aside: a rehearsal ran on no chip).
Then `criterion_status` asks every slot of a criterion for its latest measurement.

The writer (run.py) computes its verdicts with the same `verdict_for`, so an honest row
always survives its own re-judging.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from . import criteria, stats
from .criteria import Criterion, Gate, Slot
from .records import OWN_WORK, SCHEDULE_CHECK, Located, Record

_RELATIVE = 1e-9  # recomputed numbers agree with the stored ones to this relative error
_RATIO_FIELD = {"floor": "ratio_to_floor", "ceiling": "ratio_to_ceiling", "compute-alone": "ratio_to_compute_alone"}


def snapshot(tree_root=None, *, reference: bool = False) -> tuple[Gate, ...]:
    """The gates' thresholds and slots as values: taken before the graded tree is imported, so
    graded code that rewrites `criteria` in its own process changes nothing a run judges by.
    tree_root: the graded tree, whose capstone manifest declares gate 05's slots (criteria.declared);
    reference: it is the course's reference solutions (criteria.declared)."""
    gates = copy.deepcopy(criteria.GATES)
    return gates if tree_root is None else criteria.declared(gates, tree_root, reference=reference)


def verdict_for(ratio_range: tuple[float, float], interval: tuple[float, float] | None) -> str:
    """pass only when the whole confidence interval of the ratio lies in the passing range.

    A ratio whose interval straddles a limit is not shown to meet it: a tie never "beats".
    """
    if interval is None:
        return criteria.FAIL
    low, high = ratio_range
    return criteria.PASS if low <= interval[0] and interval[1] <= high else criteria.FAIL


@dataclass(frozen=True)
class RatioJudgement:
    median: float
    interval: tuple[float, float] | None
    verdict: str


def judge_ratios(ratios, ratio_range) -> RatioJudgement:
    interval = stats.median_interval(ratios)
    return RatioJudgement(stats.median(ratios), interval, verdict_for(ratio_range, interval))


def dispatch_bound(wall_per_call: float, device_per_call: float) -> bool:
    """The host could not issue calls as fast as the device ran them: more than DISPATCH_BOUND
    times the device's time per call passed on the host per call. The device time is still the
    kernel's; a Python loop of calls would report the host's instead."""
    from .timer import DISPATCH_BOUND

    return wall_per_call > DISPATCH_BOUND * device_per_call


def roofline_floor(record: Record, registry) -> float:
    """The roofline floor a row's cost gives on its chip, per JAX device, for its dtype."""
    from .. import roofline

    if not record.cost:
        raise ValueError("no cost to compute a roofline floor from")
    chip = registry.get(record.chip)
    cost = roofline.Cost(flops=record.cost["flops"], bytes=record.cost["bytes"])
    return roofline.predict(chip.per_device(), cost, record.dtype).floor_seconds


@dataclass(frozen=True)
class Rejected:
    row: Located
    why: str

    def __str__(self) -> str:
        r = self.row.record
        return (f"{self.row.where}: rejected {r.method} {r.implementation} row of gate {r.gate:02d} "
                f"{r.criterion} ({r.op}): {self.why}")


@dataclass(frozen=True)
class Judged:
    accepted: tuple[Located, ...]
    rejected: tuple[Rejected, ...]

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.accepted]


REHEARSAL_NEVER_COUNTS = "a rehearsal row (pytest --gates --rehearse: a stand-in clock, no chip) never counts"


def judge_rows(rows, registry, gates=None, *, rehearsal: bool = False) -> Judged:
    """Every row that survives re-judging, and every row that does not, with why.

    rehearsal: the rows are a rehearsal's own, judged as a chip's would be; otherwise a
    rehearsal row is rejected, and so is any other row when rehearsal is set.
    """
    gates = gates if gates is not None else criteria.GATES
    first = {}
    for row in rows:
        if row.record.rehearsal != rehearsal:
            first[id(row)] = (REHEARSAL_NEVER_COUNTS if row.record.rehearsal
                              else "a rehearsal judges only its own rows")
            continue
        first[id(row)] = _own_problem(row.record, registry, gates)
    standing = [row for row in rows if first[id(row)] is None]
    references = {}
    for row in standing:
        r = row.record
        if r.verdict == "reference" and r.is_timing:
            references[(r.run_id, r.gate, r.criterion, r.op, r.shapes, r.dtype, r.chip, r.implementation)] = r
    accepted, rejected = [], []
    for row in rows:
        why = first[id(row)]
        if why is None:
            why = _ratio_problem(row.record, references, registry, gates)
        (accepted.append(row) if why is None else rejected.append(Rejected(row, why)))
    return Judged(tuple(accepted), tuple(rejected))


def _own_problem(r: Record, registry, gates) -> str | None:
    """What is wrong with a row on its own, or None."""
    from .. import chips

    try:
        c = gates[r.gate].criterion(r.criterion)
    except KeyError as error:
        return str(error).strip("'\"")
    if (r.method == "self-reported") != (c.kind == "public"):
        return (f"a {c.kind} criterion is not shown by a {r.method} row" if c.kind != "public"
                else "a public criterion is shown only by a self-reported link")
    if r.method == "self-reported":
        return None
    if r.chip not in registry.names:
        return f"unknown chip {r.chip!r}" + ("" if registry.plugins_asked else
                                             " (the built-in chips only here: a chip a plugin registers is known "
                                             "to the pytest runs that load it)")
    if r.method == "measured" and not r.rehearsal:
        detected = chips.chip_for_device(r.platform, r.device_kind, registry)
        if detected != r.chip:
            return f"device kind {r.device_kind!r} on {r.platform or 'no platform'} is not a {r.chip}"
    if r.is_timing:
        if r.samples is None or len(r.samples) < stats.MIN_ROUNDS:
            return (f"a measured time needs its raw samples, at least {stats.MIN_ROUNDS} rounds; it has "
                    f"{0 if r.samples is None else len(r.samples)}")
        if any(not (math.isfinite(s) and s > 0) for s in r.samples):
            return "a sample is not a positive number of seconds"
        if not _same(stats.median(r.samples), r.value):
            return f"its value {r.value:.6g} s is not the median of its samples ({stats.median(r.samples):.6g} s)"
        if r.spread is None or not _same(stats.iqr(r.samples), r.spread):
            return "its spread is not the interquartile range of its samples"
        if r.timed_by == "device-profiler":
            if r.dispatch_bound != dispatch_bound(r.wall_per_call, r.value):
                return (f"dispatch_bound {r.dispatch_bound} is not what its wall time per call "
                        f"({r.wall_per_call:.6g} s) and its median ({r.value:.6g} s) give")
    if r.method == "roofline-predicted" and r.cost:
        try:
            floor = roofline_floor(r, registry)
        except ValueError as error:
            return str(error)
        if not _same(floor, r.value):
            return f"the predicted floor {r.value:.6g} s is not what its cost gives on {r.chip} ({floor:.6g} s)"
    if r.statistic in ("checks-passed", OWN_WORK, SCHEDULE_CHECK) and r.value != (1.0 if r.verdict == "pass" else 0.0):
        return f"a {r.verdict} of the checks has value {r.value!r}"
    if c.kind == "speed" and r.implementation == c.judged_implementation and r.verdict in ("pass", "fail") \
            and r.is_timing and c.ratio_of == "roofline":
        return _roofline_ratio_problem(r, c, registry)
    if r.implementation == "compute-alone" and r.is_timing and c.alone_range is not None \
            and (r.ratio_to_floor is not None or r.ratio_ci is not None):
        near = _alone_near_floor(r, c, registry)
        if isinstance(near, str):
            return near
        if not _same(near.median, r.ratio_to_floor) or r.ratio_ci is None or near.interval is None or not all(
                _same(a, b) for a, b in zip(near.interval, r.ratio_ci)):
            return "its ratio to its roofline floor, or that ratio's interval, is not what its samples and cost give"
    return None


def _alone_near_floor(r: Record, c: Criterion, registry) -> RatioJudgement | str:
    """A compute-alone row's time over the roofline floor its cost gives, judged by c.alone_range."""
    if not r.cost:
        return "a compute-alone row judged against its roofline floor needs its cost"
    try:
        floor = roofline_floor(r, registry)
    except ValueError as error:
        return str(error)
    return judge_ratios([s / floor for s in r.samples], c.alone_range)


def _roofline_ratio_problem(r: Record, c: Criterion, registry) -> str | None:
    try:
        floor = roofline_floor(r, registry)
    except ValueError as error:
        return str(error)
    return _ratio_mismatch(r, c, [s / floor for s in r.samples], "ratio_to_floor")


def _ratio_problem(r: Record, references, registry, gates) -> str | None:
    """A kernel row's ratios and verdict, recomputed from the reference rows of its run."""
    c = gates[r.gate].criterion(r.criterion)
    if c.kind != "speed" or r.implementation != "kernel" or not r.is_timing:
        return None
    for target, name in _RATIO_FIELD.items():
        reference = references.get((r.run_id, r.gate, r.criterion, r.op, r.shapes, r.dtype, r.chip, target))
        stored = getattr(r, name)
        if reference is None:
            if target == c.ratio_of:
                return f"no accepted {target} row of run {r.run_id or '(none)'} to judge it by"
            if stored is not None:
                return f"{name} without a {target} row timed in the same run"
            continue
        try:
            ratios = stats.paired_ratios(r.samples, reference.samples)
        except ValueError as error:
            return f"its samples cannot be paired with the {target} row's: {error}"
        if target == c.ratio_of:
            held_back = None
            if target == "compute-alone" and c.alone_range is not None:
                near = _alone_near_floor(reference, c, registry)
                if isinstance(near, str):
                    return f"its compute-alone row cannot be judged against its floor: {near}"
                if near.verdict != criteria.PASS:
                    held_back = (f"its compute alone is {near.median:.3g}x its roofline floor, not within "
                                 f"[{c.alone_range[0]}, {c.alone_range[1]}]")
            problem = _ratio_mismatch(r, c, ratios, name, held_back)
            if problem:
                return problem
        elif stored is None or not _same(stats.median(ratios), stored):
            return f"{name} is not the median of its round-by-round ratios"
    return None


def _ratio_mismatch(r: Record, c: Criterion, ratios, name: str, held_back: str | None = None) -> str | None:
    """held_back: why the criterion fails whatever this ratio (gate 04's compute alone far from its floor)."""
    judged = judge_ratios(ratios, c.ratio_range)
    if held_back is not None and judged.verdict == criteria.PASS:
        if r.verdict == criteria.PASS:
            return f"verdict pass, but {held_back}"
        judged = RatioJudgement(judged.median, judged.interval, criteria.FAIL)
    stored = getattr(r, name)
    if stored is None or not _same(judged.median, stored):
        return (f"{name} {stored} is not what its samples give ({judged.median:.4g})")
    if judged.interval is None or r.ratio_ci is None or not all(
            _same(a, b) for a, b in zip(judged.interval, r.ratio_ci)):
        return "its ratio's confidence interval is not what its samples give"
    if judged.verdict != r.verdict:
        low, high = c.ratio_range
        return (f"verdict {r.verdict}, but its ratio's interval [{judged.interval[0]:.3g}, "
                f"{judged.interval[1]:.3g}] judged against [{low}, {high:.3g}] is a {judged.verdict}")
    return None


def _same(a, b) -> bool:
    return isinstance(b, (int, float)) and not isinstance(b, bool) and math.isclose(
        a, b, rel_tol=_RELATIVE, abs_tol=1e-300)


# ---------------------------------------------------------------- statuses


def latest(rows: list[Record]) -> Record:
    """The latest of rows by date; of rows of the same second, the last read."""
    return max(enumerate(rows), key=lambda pair: (pair[1].date, pair[0]))[1]


def latest_run(measured: list[Record]) -> list[Record]:
    """The rows of the latest measured run among `measured` (one run_id: floor, kernel, ceiling...)."""
    last = latest(measured)
    return [r for r in measured if (r.run_id or r.id) == (last.run_id or last.id)]


def _older_code(row: Record, current_modules: dict | None) -> bool:
    if current_modules is None or not row.modules:
        return False
    return any(current_modules.get(path) != digest for path, digest in row.modules.items())


def slot_status(criterion: Criterion, rows: list[Record], current_modules: dict | None = None) -> str:
    """One slot's status from its rows (all implementations): its latest measured run speaks."""
    measured = [r for r in rows if r.method == "measured"]
    if measured:
        run = latest_run(measured)
        if any(r.verdict == "fail" for r in run):
            return criteria.FAIL
        if any(r.verdict == "not-runnable" for r in run):
            return criteria.NOT_RUNNABLE
        passed = [r for r in run if r.verdict == "pass" and r.implementation == criterion.judged_implementation]
        if passed:
            return criteria.PASS_OLDER_CODE if _older_code(passed[0], current_modules) else criteria.PASS
        return criteria.AWAITING
    off_chip = [r for r in rows if r.method == "off-chip-verified"]
    if off_chip:
        last = latest(off_chip)
        if last.verdict == "fail":
            return criteria.FAIL
        if (criterion.kind != "correctness" or _older_code(last, current_modules)
                or (current_modules is not None and not last.modules)):
            return criteria.AWAITING  # an off-chip pass speaks only for the code it verified, named by its hashes
        return criteria.PASS_OFF_CHIP
    return criteria.AWAITING


_ORDER = (criteria.FAIL, criteria.NOT_RUNNABLE, criteria.AWAITING, criteria.PASS_OFF_CHIP,
          criteria.PASS_OLDER_CODE, criteria.PASS)


def criterion_status(criterion: Criterion, rows: list[Record], current_modules: dict | None = None) -> str:
    """A criterion's status from its accepted rows on one chip: the worst of its slots'.

    A slot with no rows is awaiting hardware, so a criterion with one slot unmeasured never
    passes. A criterion whose slots are not declared (gate 05 of a tree whose capstone manifest
    declares no targets: criteria.declared) cannot pass either.
    """
    if criterion.kind == "public":
        if not criterion.applies:
            return criteria.NOT_APPLICABLE
        return criteria.SELF_REPORTED if any(r.method == "self-reported" for r in rows) else criteria.AWAITING
    if criterion.slots is None:
        if not rows:
            return criteria.AWAITING
        observed = {Slot.of(r.op, r.shapes, r.dtype) for r in rows}
        statuses = [slot_status(criterion, slot_rows(rows, s), current_modules) for s in observed]
        worst = min(statuses, key=_ORDER.index)
        return criteria.AWAITING if worst in (criteria.PASS, criteria.PASS_OLDER_CODE) else worst
    statuses = [slot_status(criterion, slot_rows(rows, s), current_modules) for s in criterion.slots]
    return min(statuses, key=_ORDER.index)


def slot_rows(rows: list[Record], slot: Slot) -> list[Record]:
    """The rows of one slot (op, shapes, dtype)."""
    return [r for r in rows if r.op == slot.op and r.shapes == slot.shapes and r.dtype == slot.dtype]


def missing_slots(criterion: Criterion, rows: list[Record]) -> list[Slot]:
    """The declared slots of a criterion with no measured row among `rows`."""
    if criterion.slots is None:
        return []
    measured = [r for r in rows if r.method == "measured"]
    return [s for s in criterion.slots if not slot_rows(measured, s)]
