"""What `tpucourse watch` runs and says: the target of its first run (a chapter, an exercise, or the
next exercise), the target of a batch of saved files, and how the exercises a run was about stand.

A saved exercise module (or its graded test file) re-runs that exercise's test file; any
other file under exercises/chNN/ re-runs the chapter. After a run the watcher says how each
exercise it ran stands and what is next, by the rule of next_up.py, from the state file that
run wrote; for a failing exercise, its most telling failure (telling.py) with its report, from
the failures the run kept in the watch's history (run_history.py).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..core.course import EXERCISES, Course, Exercise
from ..grading.messages import without_reproduction
from . import next_up, state, telling
from .progress import exercise_of
from .requests import RequestError
from .status import Status


class Target:
    """What one run covers: some exercises' test files, or whole chapters."""

    def __init__(self, exercises: list[Exercise] = (), chapters: list[str] = ()):
        self.chapters = list(dict.fromkeys(chapters))
        self.exercises = [e for e in dict.fromkeys(exercises) if e.chapter not in self.chapters]

    def pytest_paths(self) -> list[str]:
        return [f"{EXERCISES}/{c}" for c in self.chapters] + [e.test_path for e in self.exercises]

    def names(self) -> str:
        return ", ".join([f"{EXERCISES}/{c}" for c in self.chapters] + [e.test_file for e in self.exercises])


def target_of_changes(course: Course, changed: list[str], default_chapter: str) -> Target:
    """Changed files (relative to the course root, posix) to what they re-run: an exercise's
    module or test file, that test file; another file of a chapter, the chapter; a file under
    exercises/ outside any chapter, the chapter watched."""
    exercises, chapters = [], []
    for path in changed:
        parts = PurePosixPath(path).parts
        chapter = course.chapter(parts[1]) if len(parts) >= 3 and parts[0] == EXERCISES else None
        if chapter is None:
            chapters.append(default_chapter)
            continue
        name = parts[2] if len(parts) == 3 else ""
        exercise = next((e for e in chapter.exercises if name in (e.module_file, e.test_file)), None)
        if exercise is None:
            chapters.append(chapter.id)
        else:
            exercises.append(exercise)
    return Target(exercises, chapters)


def target_of_argument(course: Course, data: dict, argument: str | None) -> Target:
    """`chNN`: the chapter; `chNN.exercise`: its test file; nothing: the next exercise (next_up.py)."""
    if argument is None:
        upcoming = next_up.next_exercise(course, data)
        if upcoming is None:
            raise RequestError("every shipped exercise is done: name a chapter, e.g. tpucourse watch ch11")
        return Target([upcoming])
    chapter_id, _, name = argument.partition(".")
    if course.chapter(chapter_id) is None or not (course.root / EXERCISES / chapter_id).is_dir():
        raise RequestError(f"no graded chapter {chapter_id!r} under exercises/")
    if not name:
        return Target(chapters=[chapter_id])
    exercise = course.exercise(argument)
    if exercise is None or not next_up.shipped(course, exercise):
        raise RequestError(f"{chapter_id} has no graded exercise {name!r}")
    return Target([exercise])


DETAIL_LINES = 8  # of the most telling failure's report, below its headline


def summary_after_run(course: Course, target: Target, failures: list[dict] | None = None) -> list[str]:
    """How the exercises the run was about stand (a chapter: its first unfinished one), and what is
    next. failures: the run's failures in the order they ran ({nodeid, headline, report}, from
    run_history.last_run_failures); a failing exercise is then said by its most telling one."""
    data = state.read(course.root)
    lines = []
    about = list(target.exercises)
    for chapter_id in target.chapters:
        unfinished = next_up.next_exercise(course, data, chapter_id)
        if unfinished is None:
            lines.append(f"watch: every exercise of {chapter_id} is done")
        else:
            about.append(unfinished)
    for exercise in about:
        status = state.exercise_status(course.root, data, exercise)
        entry = data["exercises"].get(exercise.key, {})
        own = [f for f in failures or () if exercise_of(course, f["nodeid"]) == exercise]
        telling_one = telling.most_telling(own, headline=lambda f: f.get("headline", ""))
        message = (telling_one.get("headline", "") if status == Status.FAILED and telling_one
                   else entry.get("message"))
        says = status in (Status.FAILED, Status.TODO) and message
        lines.append(f"watch: {exercise.key} is {status.words}" + (f": {message.removeprefix('TODO: ')}"
                                                                     if says else ""))
        if status == Status.FAILED and telling_one:
            lines.extend(_most_telling_lines(telling_one, len(own)))
        if status != Status.DONE:
            lines.append(f"  edit {exercise.module_path}; stuck? tpucourse hint {exercise.key}")
    if all(state.exercise_status(course.root, data, e) == Status.DONE for e in about):
        upcoming = next_up.next_exercise(course, data)
        lines.append("next: every shipped exercise is done" if upcoming is None else
                     f"next: {upcoming.key}: edit {upcoming.module_path} (its tests run when you save it)")
    return lines


def changed_paths(course: Course, changes) -> list[str]:
    """The .py files a batch of file events names that exist now, relative to the course root."""
    paths = []
    for _change, path in changes:
        path = Path(path)
        if path.suffix == ".py" and path.is_file():
            paths.append(path.resolve().relative_to(course.root.resolve()).as_posix())
    return sorted(set(paths))


def _most_telling_lines(failure: dict, failing: int) -> list[str]:
    """Which test the failure shown is, its kind, and its report below the headline."""
    test = failure["nodeid"].split("::", 1)[-1]
    kind = telling.kind_of(failure.get("headline", "")).words
    lines = [f"  its failing test: {test} ({kind})" if failing == 1 else
             f"  the most telling of its {failing} failing tests: {test} ({kind})"]
    report = without_reproduction(str(failure.get("report", ""))).splitlines()[1:]
    report = [line.rstrip() for line in report if line.strip() and not line.strip().startswith("(the same report as")]
    lines.extend(f"  {line}" for line in report[:DETAIL_LINES])
    if len(report) > DETAIL_LINES:
        lines.append(f"    ... ({len(report) - DETAIL_LINES} more lines in its report above)")
    return lines
