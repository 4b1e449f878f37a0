"""What the learner's state and records say, as plain data for the site's pages.

Nothing here judges anything: exercise statuses come from the state file (learner/state.py),
with whether the trusted check confirmed each done one (state.confirmation),
"next" from learner/next_up.py, ticks from learner/self_test.py and gate statuses from the
learner's own re-judged gate records (gates/report.py), exactly as `tpucourse progress` shows
them. Gate rows say what they are: awaiting hardware, off-chip verified, or measured with chip,
dtype, shapes and date.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.course import Chapter, Course
from ..gates import criteria, report
from ..learner import next_up, self_test, state
from ..learner.status import Confirmation, Status

METHOD_WORDS = {"roofline-predicted": "roofline-predicted", "off-chip-verified": "off-chip verified",
                "measured": "measured", "self-reported": "self-reported"}


@dataclass(frozen=True)
class ExerciseView:
    key: str
    name: str
    summary: str
    status: str  # a Status value
    words: str  # the status in a sentence
    message: str  # the latest failure's headline, if any
    module_path: str
    test_path: str
    hints: tuple[str, ...]
    hints_shown: int
    confirmation: str = ""  # for a done exercise, a Confirmation value: confirmed, disagrees, your run only
    confirmation_reason: str = ""  # why the trusted check disagrees


@dataclass(frozen=True)
class CriterionView:
    id: str
    text: str
    kind: str
    status: str  # a status from gates/criteria.py, per chip where the learner has rows
    what: str  # what the row behind it is, in words


@dataclass(frozen=True)
class ChapterView:
    chapter: Chapter
    exercises: tuple[ExerciseView, ...]
    done: int
    shipped: int
    complete: bool
    gate_label: str | None  # as `tpucourse progress` says it
    gate: tuple[CriterionView, ...]
    ticked: frozenset[int]


@dataclass(frozen=True)
class CourseView:
    course: Course
    chapters: tuple[ChapterView, ...]
    chapters_complete: int
    gates_passed: int
    gates_total: int  # from the gate table, as `tpucourse progress` counts them
    next_exercise: ExerciseView | None
    notes: tuple[str, ...]

    def chapter(self, chapter_id: str) -> ChapterView:
        return next(c for c in self.chapters if c.chapter.id == chapter_id)


def course_view(course: Course) -> CourseView:
    """Everything the pages show about the learner, read once."""
    try:
        data = state.read(course.root)
        notes = []
    except state.CorruptState as error:
        data, notes = state.empty(), [f"state file unreadable, shown as empty: {error}"]
    gates = report.learner_gates(course.root)
    chapters = tuple(_chapter_view(course, data, gates, chapter) for chapter in course.chapters)
    upcoming = next_up.next_exercise(course, data)
    upcoming_view = None
    if upcoming is not None:
        upcoming_view = next(e for c in chapters for e in c.exercises if e.key == upcoming.key)
    return CourseView(course, chapters, sum(c.complete for c in chapters), gates.passed(), len(criteria.GATES),
                      upcoming_view, tuple(notes + gates.notes()))


def _chapter_view(course: Course, data: dict, gates: report.LearnerGates, chapter: Chapter) -> ChapterView:
    graded = [e for e in chapter.exercises if next_up.shipped(course, e)]
    views = []
    for exercise in graded:
        status = state.exercise_status(course.root, data, exercise)
        entry = data["exercises"].get(exercise.key, {})
        confirmation, reason = (state.confirmation(course.root, data, exercise) if status == Status.DONE
                                else ("", ""))
        views.append(ExerciseView(exercise.key, exercise.name, exercise.summary, status.value, status.words,
                                  entry.get("message", "") if status in (Status.FAILED, Status.TODO) else "",
                                  exercise.module_path, exercise.test_path, exercise.hints,
                                  state.hints_shown(data, exercise.key), str(confirmation), reason))
    done = sum(1 for v in views if v.status == Status.DONE)
    gate_rows: tuple[CriterionView, ...] = ()
    label = None
    if chapter.gate is not None:
        label = gates.label(chapter.gate)
        gate_rows = _gate_rows(gates, chapter.gate)
    return ChapterView(chapter, tuple(views), done, len(graded), bool(graded) and done == len(graded), label,
                       gate_rows, frozenset(self_test.ticked(data, chapter.id)))


def _gate_rows(gates: report.LearnerGates, number: int) -> tuple[CriterionView, ...]:
    from ..chips import DEFAULT_CHIP

    gate = criteria.gate(number)
    chips = sorted({r.chip for r in gates.records if r.chip}) or [DEFAULT_CHIP]
    per_chip = {chip: gates.statuses(chip)[number] for chip in chips}
    rows = []
    for c in gate.criteria:
        statuses = {chip: per_chip[chip][c.id] for chip in chips}
        shown = "; ".join(f"{chip}: {s}" for chip, s in statuses.items()) if len(set(statuses.values())) > 1 \
            else next(iter(statuses.values()))
        mine = [r for r in gates.records if r.gate == number and r.criterion == c.id]
        rows.append(CriterionView(c.id, c.text, c.kind, shown, row_words(mine)))
    return tuple(rows)


def row_words(rows) -> str:
    """What the latest, strongest row of a criterion is: awaiting hardware, off-chip, measured with detail."""
    if not rows:
        return "awaiting hardware: no row yet (a gate run on the chip writes one)"
    rank = {"roofline-predicted": 0, "off-chip-verified": 1, "self-reported": 2, "measured": 2}
    best = max(rows, key=lambda r: (rank[r.method], r.date))
    if best.method == "self-reported":
        return f"self-reported link {best.value} ({best.date[:10]})"
    shapes = " · ".join("×".join(map(str, s)) for s in best.shapes)
    detail = f"{best.chip}, {best.dtype}, {shapes}, {best.date[:10]}"
    if best.method == "measured":
        value = "" if best.value is None else f"{best.statistic} {best.value * 1e6:.1f} µs, "
        return f"measured: {value}{best.verdict} ({detail})"
    if best.method == "off-chip-verified":
        return f"off-chip verified, awaiting hardware ({detail}; no time)"
    return f"awaiting hardware: roofline-predicted floor only ({detail})"


def status_counts(view: ChapterView) -> str:
    if not view.shipped:
        return "no exercises yet"
    confirmed = sum(1 for x in view.exercises if x.confirmation == Confirmation.CONFIRMED)
    return f"{view.done}/{view.shipped} exercises" + (f", {confirmed} confirmed" if view.done else "")
