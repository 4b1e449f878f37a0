"""What the records say: rows read and re-judged, every gate's status per chip, the gate table and
bench/README.md.

Statuses are computed only from rows that survive re-judging (judge.py), and only from the
rows of one graded tree: the learner's progress reads "exercises" rows, the course's page
"solutions" rows. Bad lines and rejected rows are listed with their path and line, never
silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import chips
from ..core.course import EXERCISES
from . import criteria, device_ops, judge, placement
from . import records as rec
from .provenance import code_at_commit, module_hashes

_METHOD_LABEL = {"roofline-predicted": "predicted", "off-chip-verified": "off-chip", "measured": "measured",
                 "self-reported": "self-reported"}


@dataclass(frozen=True)
class Loaded:
    """Rows read from records files and re-judged."""

    accepted: tuple[rec.Record, ...]
    rejected: tuple[judge.Rejected, ...]
    bad: tuple[rec.BadLine, ...]

    def problems(self) -> list[str]:
        """One line per bad line and rejected row, with its path and line."""
        return [str(b) for b in self.bad] + [str(r) for r in self.rejected]


def load(paths, registry, tree: str | None = None, gates=None) -> Loaded:
    """Read records files, keep the rows of `tree` (all when None), re-judge them."""
    readout = rec.EMPTY
    for path in paths:
        readout = readout + rec.read(path)
    rows = [row for row in readout.rows if tree is None or row.record.tree == tree]
    judged = judge.judge_rows(rows, registry, gates)
    return Loaded(tuple(judged.records), judged.rejected, readout.bad)


def current_modules(course_root: Path, tree: str = EXERCISES) -> dict[str, str]:
    """sha256 of every graded module now in a tree's chapters, keyed as rows key them."""
    found = {}
    base = Path(course_root) / tree
    for chapter_dir in sorted(base.glob("ch[0-9][0-9]")) if base.is_dir() else ():
        found.update(module_hashes(chapter_dir, f"{tree}/{chapter_dir.name}"))
    return found


@dataclass(frozen=True)
class LearnerGates:
    """The learner's gates for `tpucourse progress`: only the rows of their own exercises/ runs,
    re-judged; a pass of code edited since shows as older code. The course's own records of its
    reference solutions (bench/) are never counted here."""

    records: tuple[rec.Record, ...]
    current: dict
    course_root: Path
    problems: tuple[str, ...]
    gates: tuple = criteria.GATES  # gate 05's slots declared by the learner's capstone manifest

    def label(self, number: int) -> str:
        return gate_label(self.records, number, current=self.current, course_root=self.course_root,
                          gates=self.gates)

    def passed(self) -> int:
        return gates_passed(self.records, current=self.current, course_root=self.course_root, gates=self.gates)

    def statuses(self, chip_name: str) -> dict[int, dict[str, str]]:
        return gate_statuses(self.records, chip_name, current=self.current, course_root=self.course_root,
                             gates=self.gates)

    def notes(self) -> list[str]:
        lines = [f"gate records: {p}" for p in self.problems[:10]]
        if self.problems:
            lines.append(f"gate records: {len(self.problems)} bad lines or rejected rows, not counted; "
                         f"run `tpucourse records check` (--repair moves unreadable lines aside)")
        lines.append(f"the course's own gate records of its reference solutions: {rec.PUBLISHED_PATH.parent}/"
                     f"README.md (never counted as yours)")
        return lines


def learner_gates(course_root: Path) -> LearnerGates:
    from ..core.paths import shown_in_text

    gates = criteria.declared(criteria.GATES, Path(course_root) / EXERCISES)
    loaded = load([Path(course_root) / rec.DEFAULT_PATH], chips.ChipRegistry(), tree=EXERCISES, gates=gates)
    return LearnerGates(loaded.accepted, current_modules(course_root), Path(course_root),
                        tuple(shown_in_text(p, course_root) for p in loaded.problems()), gates)


def _has_gate_test(g: criteria.Gate, course_root: Path | None) -> bool:
    return course_root is None or (Path(course_root) / g.test_file()).is_file()


def gate_statuses(records, chip_name: str, *, current: dict | None = None, course_root: Path | None = None,
                  gates=None) -> dict[int, dict[str, str]]:
    """{gate number: {criterion id: status}} for the chip rows name `chip_name`, from accepted rows."""
    gates = gates if gates is not None else criteria.GATES
    rows = [r for r in records if r.chip == chip_name or r.method == "self-reported"]
    table = {}
    for g in gates:
        mine = [r for r in rows if r.gate == g.number]
        if not mine and not _has_gate_test(g, course_root):
            table[g.number] = {c.id: criteria.NO_GATE_TEST for c in g.criteria}
            continue
        table[g.number] = {c.id: judge.criterion_status(c, [r for r in mine if r.criterion == c.id], current)
                           for c in g.criteria}
    return table


_CORRECTNESS_WORDS = {criteria.PASS_OFF_CHIP: "communication off-chip verified",
                      criteria.PASS: "communication verified on the chip",
                      criteria.PASS_OLDER_CODE: "communication verified on the chip (older code)",
                      criteria.FAIL: "communication failed its check"}


def too_few_chips(records, number: int, chip_name: str, statuses: dict) -> str | None:
    """What a gate says when a run on `chip_name` had fewer chips than its kernel needs (gate 04 on one
    chip): what it needs, and what could still be checked, from the latest run of each speed slot.

    statuses: the gate's criterion statuses on that chip (gate_statuses). None when no run was short.
    """
    g = criteria.gate(number)
    mine = [r for r in records if r.gate == number and r.chip == chip_name and r.method == "measured"]
    short, alone = None, []
    for c in g.criteria:
        rows = [r for r in mine if r.criterion == c.id]
        slots = c.slots or [criteria.Slot.of(r.op, r.shapes, r.dtype) for r in rows]
        for slot in dict.fromkeys(slots):
            measured = judge.slot_rows(rows, slot)
            run = judge.latest_run(measured) if measured else []
            missing = [r for r in run if r.statistic == placement.TOO_FEW_CHIPS]
            if missing:
                short = placement.chips_short(missing[0].notes) or short
                alone.append(any(r.implementation == "compute-alone" and r.is_timing for r in run))
    if short is None:
        return None
    needed, have = short
    checked = []
    if alone:
        checked.append("compute alone measured" if all(alone) else "compute alone not measured")
    for c in g.criteria:
        if c.kind == "correctness":
            checked.append(_CORRECTNESS_WORDS.get(statuses.get(c.id), "communication not checked yet"))
    where = "one chip" if have == 1 else f"{have} chips"
    return f"not runnable on {where} (needs {needed} chips)" + (f": {', '.join(checked)}" if checked else "")


def _chips(records) -> list[str]:
    return sorted({r.chip for r in records if r.chip})


def passed_on(records, number: int, *, current: dict | None = None, course_root: Path | None = None,
              gates=None) -> list[str]:
    """The chips on which every criterion of a gate is satisfied (measured passes, a public link)."""
    return [chip for chip in _chips(records)
            if all(s in criteria.SATISFIED for s in gate_statuses(
                records, chip, current=current, course_root=course_root, gates=gates)[number].values())]


def gates_passed(records, *, current: dict | None = None, course_root: Path | None = None, gates=None) -> int:
    """Gates whose every criterion is satisfied on some chip."""
    gates = gates if gates is not None else criteria.GATES
    return sum(1 for g in gates if passed_on(records, g.number, current=current, course_root=course_root,
                                              gates=gates))


def gate_label(records, number: int, *, current: dict | None = None, course_root: Path | None = None,
               gates=None) -> str:
    """One gate in a word or two for `tpucourse progress`, from its statuses on every chip."""
    if (course_root is not None and not _has_gate_test(criteria.gate(number), course_root)
            and not any(r.gate == number for r in records)):
        return criteria.NO_GATE_TEST
    per_chip = {chip: gate_statuses(records, chip, current=current, course_root=course_root, gates=gates)[number]
                for chip in _chips(records)}
    passed = passed_on(records, number, current=current, course_root=course_root, gates=gates)
    if passed:
        linked = any(s == criteria.SELF_REPORTED for s in per_chip[passed[0]].values())
        reference = any(s == criteria.NOT_APPLICABLE for s in per_chip[passed[0]].values())
        return (f"passed on hardware ({', '.join(passed)})" + ("; upstream link self-reported" if linked else "")
                + ("; its upstream criterion is a learner's own, not applicable to the reference solutions"
                   if reference else ""))
    older = [chip for chip, statuses in per_chip.items()
             if all(s in criteria.SATISFIED + (criteria.PASS_OLDER_CODE,) for s in statuses.values())]
    if older:
        return f"passed on hardware (older code: a graded module changed since; {', '.join(older)})"
    failed = sorted({f"{chip}: {c}" for chip, statuses in per_chip.items()
                     for c, s in statuses.items() if s == criteria.FAIL})
    if failed:
        return f"failed ({'; '.join(failed)})"
    short = [f"{note} ({chip})" for chip, statuses in per_chip.items()
             if (note := too_few_chips(records, number, chip, statuses))]
    if short:
        return "; ".join(short)
    if any(s == criteria.PASS_OFF_CHIP for statuses in per_chip.values() for s in statuses.values()):
        return "off-chip verified, awaiting hardware"
    return criteria.AWAITING


def gate_table_lines(records, chip_name: str, *, course_root: Path | None = None, tree: str = "",
                     gates=None, current: dict | None = None, seconds: dict | None = None) -> list[str]:
    """The closing gate table; seconds: {gate: seconds its tests took in this run}, shown beside each gate."""
    gates = gates if gates is not None else criteria.GATES
    statuses = gate_statuses(records, chip_name, current=current, course_root=course_root, gates=gates)
    whose = f", rows of {tree}" if tree else ""
    lines = [f"gates for {chip_name} (pass only on measured rows; off-chip results are not gate passes{whose})"]
    for g in gates:
        took = f", {duration(seconds[g.number])} this run" if seconds and g.number in seconds else ""
        lines.append(f"gate {g.number:02d} {g.title} ({g.chapter}){took}")
        short = too_few_chips(records, g.number, chip_name, statuses[g.number])
        if short:
            lines.append(f"  {short}")
        for c in g.criteria:
            status = statuses[g.number][c.id]
            mine = [r for r in records if r.gate == g.number and r.criterion == c.id and r.chip == chip_name]
            missing = judge.missing_slots(c, mine)
            detail = (f" ({len(c.slots) - len(missing)}/{len(c.slots)} slots measured)"
                      if c.slots and 0 < len(missing) < len(c.slots) else "")
            lines.append(f"  {status:<17}  {c.text}{detail}")
    return lines


def duration(seconds: float) -> str:
    """A run's time in a word: 45s, 2m11s, 1h02m."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _us(seconds) -> str:
    return "" if seconds is None else f"{seconds * 1e6:.1f} µs"


def _ratio(value) -> str:
    return "" if value is None else f"{value:.2f}×"


def _value(r: rec.Record) -> str:
    if r.value is None:
        return "not runnable here"
    if r.method == "self-reported":
        return str(r.value)
    return _us(r.value) if r.unit == "s" else f"{r.value:.3g} {r.unit}"


def _latest_per_slot(records) -> list[rec.Record]:
    """The latest row of each slot, a measurement before an off-chip result before a prediction."""
    rank = {"roofline-predicted": 0, "off-chip-verified": 1, "measured": 2, "self-reported": 2}
    best: dict[tuple, rec.Record] = {}
    for r in records:
        held = best.get(r.slot)
        if held is None or (rank[r.method], r.date) >= (rank[held.method], held.date):
            best[r.slot] = r
    return list(best.values())


@dataclass(frozen=True)
class Shown:
    """A row as a table shows it, with the roofline prediction its measurement superseded (folded
    into its line, never listed as if nothing had been measured)."""

    record: rec.Record
    superseded: rec.Record | None = None


def _measurement(r: rec.Record) -> tuple:
    """What one measurement is of: a criterion's op at its shapes and dtype on a chip (every implementation)."""
    return (r.gate, r.criterion, r.op, r.shapes, r.dtype, r.chip)


def rows_shown(records) -> list[Shown]:
    """The rows a table of records shows, one measurement at a time.

    Where a measurement was made on the chip, the rows of its latest measured run (floor, kernel,
    ceiling, compute alone: one run_id), each carrying the roofline prediction it supersedes;
    where none was, the latest off-chip result and prediction of each implementation, as they are.
    """
    groups: dict[tuple, list[rec.Record]] = {}
    for r in records:
        groups.setdefault(_measurement(r), []).append(r)
    shown = []
    for rows in groups.values():
        measured = [r for r in rows if r.method == "measured"]
        if not measured:
            shown += [Shown(r) for r in _latest_per_slot(rows)]
            continue
        run = judge.latest_run(measured)
        predictions = [r for r in rows if r.method == "roofline-predicted"]
        prediction = judge.latest(predictions) if predictions else None
        shown += [Shown(r, prediction) for r in run]
    return sorted(shown, key=lambda s: (s.record.chip, s.record.gate, s.record.criterion, s.record.op,
                                         s.record.shapes, s.record.implementation))


def timed_by_label(r: rec.Record) -> str:
    """How a measured time was taken, in the tables' words: the method, whether it was assumed
    (a row written before rows said so), and whether the host was the bottleneck."""
    if r.timing_method is None:
        return ""
    label = r.timing_method + (" (assumed: the row predates timed_by)" if r.timing_assumed else "")
    return label + (", dispatch-bound" if r.dispatch_bound else "")


def sampling_label(r: rec.Record) -> str:
    """N, the calls per sample, and what sized it: "14 (device time)"; "" for a row that does not say."""
    if r.calls_per_sample is None:
        return ""
    return f"{r.calls_per_sample}" + (f" ({r.sized_by.replace('-', ' ')})" if r.sized_by else "")


def mxu_label(r: rec.Record) -> str:
    """The MXU's share of the chip's peak a time means at the op's model FLOPs (and the FLOPs executed, where known)."""
    if not r.mxu or r.mxu.get("utilisation") is None:
        return ""
    executed = r.mxu.get("executed_flops")
    return f"{r.mxu['utilisation']:.0%}" + (f" ({executed:.3g} FLOPs executed)" if executed is not None else "")


def ops_label(r: rec.Record) -> str:
    """The per-op device time of a measured row, longest ops first."""
    return device_ops.describe(r.ops) if r.ops else ""


def commit_label(r: rec.Record) -> str:
    """The commit whose code ran, shortened, marked when the checkout differed from it."""
    if not r.git_commit:
        return ""
    return r.git_commit[:10] + ("+dirty" if r.git_dirty else "")


def bench_readme(loaded: Loaded, *, course_root: Path | None = None, source: str = "records.jsonl") -> str:
    """bench/README.md: the course's records of its reference solutions, per chip."""
    records = list(loaded.accepted)
    current = current_modules(course_root, "solutions") if course_root is not None else None
    gates = (criteria.declared(criteria.GATES, Path(course_root) / "solutions", reference=True)
             if course_root is not None else None)
    out = [
        "# Gate records of the course's reference solutions",
        "",
        f"Generated by `tpucourse bench` from `{source}`; do not edit by hand. These rows are the",
        "course's own (`--solutions` runs), never a learner's: `tpucourse progress` shows only the rows",
        "of your `exercises/` runs, kept in `.tpucourse/records.jsonl`.",
        "",
        "Every number says what it is: **predicted** (roofline floor from the chip's figures),",
        "**off-chip** (correct under interpret mode, no time), or **measured** (run on the chip; the",
        "median of the rounds, their interquartile range, and the 95% interval of the judged ratio).",
        "A measurement stands in place of the prediction it supersedes, whose value stays in its",
        "\"predicted floor\" column. \"timed by\" says how a time was taken: `device-profiler` (the device",
        "time of the programs a call ran, from the profiler's device trace) or `wall-calls` (host wall",
        "time over N calls per sync); \"dispatch-bound\" marks a time the host could not issue calls fast",
        "enough for. \"N\" is the calls each sample holds and what sized it (one call's device time, or the",
        "host's clock); \"MXU\" the share of the chip's peak FLOP/s the time means at the op's model FLOPs.",
        "Under each chip, every measured row's per-op device time: the ops the device ran in its calls",
        "(the kernel's custom call, XLA's fusions, copies, prefetches), median device time per call.",
        "Every row was re-judged when this page was made; rows that failed re-judging are",
        "listed as rejected. Failed rows are never deleted and are listed below.",
        "",
        "Gate 00 on a GPU: `bench/device_gate00.sh` installs the course on a machine with a GPU (no",
        "package index needed), measures XLA's matmul, skinny matmul and add against their roofline",
        "floors there and brings the rows back. No GPU has been available to the course yet: it has",
        "been rehearsed on a CPU only, and none of the rows below comes from it.",
        "",
    ]
    chip_names = _chips(records)
    if not chip_names:
        out.append(f"No records yet: run `pytest --gates --solutions --chip={chips.DEFAULT_CHIP} --records "
                   f"bench/records.jsonl`.")
    out.append(f"Gates passed: {gates_passed(records, current=current, course_root=course_root, gates=gates)}/"
               f"{len(criteria.GATES)} (measured rows only).")
    out.append("")
    for chip in chip_names:
        statuses = gate_statuses(records, chip, current=current, course_root=course_root, gates=gates)
        out += [f"## {chip}", "", "| gate | criterion | whose words | status |", "|---|---|---|---|"]
        for g in criteria.GATES:
            short = too_few_chips(records, g.number, chip, statuses[g.number])
            for c in g.criteria:
                status = statuses[g.number][c.id]
                shown = short if short and status == criteria.NOT_RUNNABLE else status
                out.append(f"| {g.number:02d} {g.title} | {c.text} | {g.words}'s | {shown} |")
        columns = ("gate", "criterion", "op", "shapes", "dtype", "implementation", "what", "value", "spread",
                   "rounds", "timed by", "÷ floor", "÷ ceiling", "÷ compute alone", "95% interval", "verdict",
                   "predicted floor", "date", "device kind", "jax", "commit", "N", "MXU")
        out += ["", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for shown in (s for s in rows_shown(records) if s.record.chip == chip):
            r = shown.record
            interval = "" if r.ratio_ci is None else f"[{r.ratio_ci[0]:.3g}, {r.ratio_ci[1]:.3g}]"
            predicted = _us(shown.superseded.value) if shown.superseded is not None else ""
            out.append(
                f"| {r.gate:02d} | {r.criterion} | {r.op} | {' · '.join('×'.join(map(str, s)) for s in r.shapes)} | "
                f"{r.dtype} | {r.implementation} | {_METHOD_LABEL[r.method]} {r.statistic} | {_value(r)} | "
                f"{_us(r.spread) if r.unit == 's' else ''} | {len(r.samples) if r.samples else ''} | "
                f"{timed_by_label(r)} | {_ratio(r.ratio_to_floor)} | {_ratio(r.ratio_to_ceiling)} | "
                f"{_ratio(r.ratio_to_compute_alone)} | {interval} | {r.verdict} | {predicted} | {r.date[:10]} | "
                f"{r.device_kind if r.method == 'measured' else ''} | {r.jax} | {commit_label(r)} | "
                f"{sampling_label(r)} | {mxu_label(r)} |"
            )
        out.append("")
        broken_down = [s.record for s in rows_shown(records) if s.record.chip == chip and s.record.ops]
        if broken_down:
            out += [f"### Per-op device time on {chip}", ""]
            out += [f"- gate {r.gate:02d} {r.criterion} {r.op} {r.dtype} {r.implementation}: {ops_label(r)}"
                    for r in broken_down]
            out.append("")
    links = [r for r in records if r.method == "self-reported"]
    if links:
        out += ["## Public links (self-reported)", ""]
        out += [f"- gate {r.gate:02d} {r.criterion}: {r.value} ({r.date[:10]})" for r in links]
        out.append("")
    out += ["## Failures (kept forever)", ""]
    failed = [r for r in records if r.verdict == "fail"]
    if not failed:
        out.append("None recorded.")
    for r in failed:
        out.append(f"- {r.date} {r.chip} gate {r.gate:02d} {r.criterion}: {r.op} {r.dtype} "
                   f"{r.implementation}, {_METHOD_LABEL[r.method]} {r.statistic} ({r.test_id})")
    problems = loaded.problems()
    if problems:
        out += ["", "## Rejected rows and unreadable lines", ""]
        out += [f"- {line}" for line in problems]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class CommitCheck:
    problems: tuple[str, ...]  # rows whose commit holds other code than the row names
    unknown: tuple[str, ...]  # commits rows name that the repository does not have (not checked)


def check_commits(records, repo: Path) -> CommitCheck:
    """Rows whose commit does not hold the code they name: for each row that names a commit, a clean
    tree and its graded modules' hashes, the commit's files in the repository at `repo` must be that code."""
    problems, unknown = [], []
    for r in records:
        if not (r.git_commit and r.git_dirty is False and r.modules and r.tree in (EXERCISES, "solutions")):
            continue
        found = code_at_commit(repo, r.git_commit, r.modules)
        if found is None:
            unknown.append(r.git_commit[:10])
        for why in found or ():
            problems.append(f"gate {r.gate:02d} {r.criterion} {r.op} {r.implementation} ({r.date}): {why}")
    return CommitCheck(tuple(dict.fromkeys(problems)), tuple(dict.fromkeys(unknown)))
