"""What the learner does next: one rule, used by the run's summary, `tpucourse progress`,
`tpucourse hint` and `tpucourse watch` alike.

The chapter the learner works in is the one their latest run of exercises/ was about (of
the chapters it touched, the first with an exercise left unfinished; the state file keeps
it). Next is the first unfinished exercise of that chapter; when it has none, the first
unfinished one after it in course order, then from the start of the course. Unfinished
means not done as the state file says (done, and the file unchanged since).
"""

from __future__ import annotations

from ..core.course import Course, Exercise
from . import state
from .status import Status


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
