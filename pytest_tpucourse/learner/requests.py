"""What the learner names when asking the course for something: the course they stand in, an
exercise (`ch11.matmul`, `ch11`, or nothing for the next one), and the state file read.

`RequestError` is the one refusal: what was asked cannot be done, and its message says why.
The `tpucourse` command prints it (exit status 2); the site's server answers it as a 400.
"""

from __future__ import annotations

from pathlib import Path

from ..core.course import Course, CourseDataError, Exercise, find_course_root, load_course
from . import state
from .next_up import next_exercise


class RequestError(Exception):
    """What the learner asked for cannot be done; the message says why."""


def course_here(start: Path | None = None) -> Course:
    """The course whose course.toml is at or above `start` (default: the current folder)."""
    root = find_course_root(Path(start or Path.cwd()))
    if root is None:
        raise RequestError(f"no course.toml at or above {Path(start or Path.cwd()).resolve()}: "
                           "run tpucourse inside the course checkout")
    try:
        return load_course(root)
    except CourseDataError as error:
        raise RequestError(f"course data: {error}") from None


def read_state(course: Course) -> dict:
    """The learner's state file; a corrupt one is a refusal that says how to recover."""
    try:
        return state.read(course.root)
    except state.CorruptState as error:
        raise RequestError(str(error)) from None


def resolve_exercise(course: Course, data: dict, target: str | None) -> Exercise:
    """`ch11.matmul`, `ch11` (its next unfinished exercise) or nothing (the course's next)."""
    if target is None:
        found = next_exercise(course, data)
        if found is None:
            raise RequestError("every shipped exercise is done: name one, e.g. tpucourse hint ch11.matmul")
        return found
    chapter_id, _, name = target.partition(".")
    chapter = course.chapter(chapter_id)
    if chapter is None:
        raise RequestError(f"no chapter {chapter_id!r}: chapters are "
                           f"{course.chapters[0].id}-{course.chapters[-1].id}")
    if not name:
        if not chapter.exercises:
            raise RequestError(f"{chapter.label} has no exercises yet")
        return next_exercise(course, data, chapter.id) or chapter.exercises[-1]
    exercise = chapter.exercise(name)
    if exercise is None:
        raise RequestError(f"{chapter.id} has no exercise {name!r}; it has "
                           f"{', '.join(e.name for e in chapter.exercises) or 'none yet'}")
    return exercise
