"""`tpucourse watch [chNN | chNN.exercise]`: on each save under exercises/, re-run the tests it concerns.

A saved exercise module (or its graded test file) re-runs that exercise's test file; any
other file under exercises/chNN/ re-runs the chapter. The watcher says at once what changed
and what it runs, then runs pytest with `-x` in a child forked from one warm process
(warm_runs.py), so a correct kernel's save is answered in seconds and a hung kernel cannot
take the watcher down. Between runs it blocks on the operating system's file events
(watchfiles), it never polls. After a run it says how each exercise it ran stands and what
is next, by the rule of next_up.py, from the state file that run wrote.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path, PurePosixPath

from ..core.course import EXERCISES, Course, Exercise
from . import learner
from ..learner import next_up, state
from ..learner.status import Status
from ..learner.warm_runs import WarmRuns


RUST_TIMEOUT_MS = 500  # how often the file watcher wakes with nothing to report (it does not poll files)


def waiting(runs: WarmRuns) -> str:
    return f"watch: waiting for changes under exercises/ ({runs.mode}; Ctrl-C to stop)"


def _python_changes(change, path: str) -> bool:
    return path.endswith(".py")


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
            raise learner.CommandError("every shipped exercise is done: name a chapter, e.g. tpucourse watch ch11")
        return Target([upcoming])
    chapter_id, _, name = argument.partition(".")
    if course.chapter(chapter_id) is None or not (course.root / EXERCISES / chapter_id).is_dir():
        raise learner.CommandError(f"no graded chapter {chapter_id!r} under exercises/")
    if not name:
        return Target(chapters=[chapter_id])
    exercise = course.exercise(argument)
    if exercise is None or not next_up.shipped(course, exercise):
        raise learner.CommandError(f"{chapter_id} has no graded exercise {name!r}")
    return Target([exercise])


def summary_after_run(course: Course, target: Target) -> list[str]:
    """How the exercises the run was about stand (a chapter: its first unfinished one), and what is next."""
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
        says = status in (Status.FAILED, Status.TODO) and entry.get("message")
        lines.append(f"watch: {exercise.key} is {status.words}" + (f": {entry['message']}" if says else ""))
        if status != Status.DONE:
            lines.append(f"  edit {exercise.module_path}; stuck? tpucourse hint {exercise.key}")
    if all(state.exercise_status(course.root, data, e) == Status.DONE for e in about):
        upcoming = next_up.next_exercise(course, data)
        lines.append("next: every shipped exercise is done" if upcoming is None else
                     f"next: {upcoming.key}: edit {upcoming.module_path} (its tests run when you save it)")
    return lines


def run_once(course: Course, runs: WarmRuns, target: Target, extra: list[str]) -> int:
    code = runs.run([*target.pytest_paths(), "-x", *extra])
    lines = []
    if code < 0:
        lines.append(f"watch: the run was killed by {_signal_name(-code)} before it ended; "
                     f"the watch goes on, and the state file keeps what earlier runs showed")
    try:
        lines += summary_after_run(course, target)
    except state.CorruptState as error:
        lines.append(f"watch: {error}")
    print("\n".join(lines), flush=True)
    return code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def changed_paths(course: Course, changes) -> list[str]:
    """The .py files a batch of file events names that exist now, relative to the course root."""
    paths = []
    for _change, path in changes:
        path = Path(path)
        if path.suffix == ".py" and path.is_file():
            paths.append(path.resolve().relative_to(course.root.resolve()).as_posix())
    return sorted(set(paths))


def main(args) -> int:
    try:
        import watchfiles
    except ImportError:  # the course runs without it; only this command needs the OS's file events
        raise learner.CommandError("needs watchfiles: pip install watchfiles "
                                    "(or, in the course checkout, pip install -e .); pytest runs "
                                    "the exercises without it") from None

    course = learner.course_here()
    try:
        data = state.read(course.root)
    except state.CorruptState as error:
        raise learner.CommandError(str(error)) from None
    target = target_of_argument(course, data, args.target)
    if args.max_runs is not None and args.max_runs < 1:
        raise learner.CommandError("--max-runs must be at least 1")
    default_chapter = (target.chapters or [target.exercises[0].chapter])[0]
    extra = shlex.split(args.pytest_args)
    runs = WarmRuns(course.root)

    # Watching starts before the first run, so a save made while a run goes on is not lost:
    # the first (empty) yield comes once the file watcher is running.
    events = watchfiles.watch(course.root / EXERCISES, watch_filter=_python_changes, debounce=100,
                              rust_timeout=RUST_TIMEOUT_MS, yield_on_timeout=True, raise_interrupt=False)
    code = 130
    try:
        next(events)
        print(f"watch: running {target.names()}", flush=True)
        code = run_once(course, runs, target, extra)
        count = 1
        if args.max_runs is not None and count >= args.max_runs:
            return code
        runs.preload()  # before the first save, so that save is answered warm
        print(waiting(runs), flush=True)
        for changes in events:
            changed = changed_paths(course, changes)
            if not changed:
                continue
            target = target_of_changes(course, changed, default_chapter)
            print(f"changed: {', '.join(changed)}, running {target.names()}", flush=True)
            code = run_once(course, runs, target, extra)
            count += 1
            if args.max_runs is not None and count >= args.max_runs:
                break
            print(waiting(runs), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        events.close()
    return code
