"""What the learner does next: one rule, used by the run's summary, `tpucourse progress`,
`tpucourse hint` and `tpucourse watch` alike.

The chapter the learner works in is the one their latest run of exercises/ was about (of
the chapters it touched, the first with an exercise left unfinished; the state file keeps
it). Next is the first unfinished exercise of that chapter; when it has none, the first
unfinished one after it in course order, then from the start of the course. Unfinished
means not done as the state file says (done, and the file unchanged since).

On a TPU, a chapter done natively has a next step of its own: its gate, after `tpucourse confirm`
where the gate times only kernels the trusted check has confirmed (README, "On a TPU VM").
"""

from __future__ import annotations

from ..chips import Chip
from ..core.course import Course, Exercise
from ..gates import criteria
from . import state
from .status import Confirmation, Status


def shipped(course: Course, exercise: Exercise) -> bool:
    """The exercise has graded tests in this checkout (chapters are written one at a time)."""
    return (course.root / exercise.test_path).is_file()


def unfinished(course: Course, data: dict, exercise: Exercise) -> bool:
    return shipped(course, exercise) and state.exercise_status(course.root, data, exercise) != Status.DONE


def working_chapter(course: Course, data: dict) -> str | None:
    """The chapter the learner's latest run was about, as the state file records it."""
    chapter = data.get("working_chapter")
    return chapter if course.chapter(chapter or "") is not None else None


def next_exercise(course: Course, data: dict, chapter_id: str | None = None) -> Exercise | None:
    """The exercise to do next: of `chapter_id` only, when given; else by the rule above."""
    if chapter_id is not None:
        chapter = course.chapter(chapter_id)
        return next((e for e in chapter.exercises if unfinished(course, data, e)), None) if chapter else None
    chapters = list(course.chapters)
    start = working_chapter(course, data)
    if start is not None:
        index = [c.id for c in chapters].index(start)
        chapters = chapters[index:] + chapters[:index]
    return next((e for c in chapters for e in c.exercises if unfinished(course, data, e)), None)


def chapter_worked_in(course: Course, data: dict, touched: list[str]) -> str | None:
    """Of the chapters a run touched (course order), the first with an unfinished exercise,
    else the last one: the chapter the learner works in after that run."""
    for chapter_id in touched:
        if next_exercise(course, data, chapter_id) is not None:
            return chapter_id
    return touched[-1] if touched else None


def next_on_chip(course: Course, data: dict, touched: list[str], chip: Chip,
                 gates_passed: frozenset = frozenset()) -> str | None:
    """After a run natively on a TPU: of the chapters it touched (course order), the first that closes
    a gate not yet passed and has every shipped exercise done, its next step on the chip; None when
    there is none."""
    for chapter_id in touched:
        chapter = course.chapter(chapter_id)
        if chapter is None or chapter.gate is None or chapter.gate in gates_passed:
            continue
        exercises = [e for e in chapter.exercises if shipped(course, e)]
        if not exercises or any(unfinished(course, data, e) for e in exercises):
            continue
        gate = f"pytest exercises/{chapter.id} --gates --chip={chip.name}"
        own = any(g.times_own_kernel for g in criteria.GATES if g.number == chapter.gate)
        if own and any(state.confirmation(course.root, data, e)[0] != Confirmation.CONFIRMED for e in exercises):
            return (f"next on this chip: tpucourse confirm {chapter.id}, then {gate} (gate {chapter.gate:02d} "
                    f"times only kernels the trusted check has confirmed)")
        return f"next on this chip: {gate} (gate {chapter.gate:02d})"
    return None
