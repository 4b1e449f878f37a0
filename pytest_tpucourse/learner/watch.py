"""`tpucourse watch [chNN]`: re-run a chapter's graded tests whenever a file under exercises/ changes.

Each run is a fresh `python -m pytest exercises/chNN -x` child process (a fresh
import of the learner's modules, and a hung kernel cannot take the watcher down).
Between runs it blocks on the operating system's file events (watchfiles), it
never polls. After a run it names the first exercise that is not done, its
message and the hint command, from the state file that run wrote.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from ..course import EXERCISES
from . import commands, state
from .status import Status


def _python_changes(change, path: str) -> bool:
    return path.endswith(".py")


def summary_after_run(course, chapter_id: str) -> list[str]:
    data = state.read(course.root)
    exercise = commands.next_exercise(course, data, chapter_id)
    if exercise is None:
        return [f"watch: every exercise of {chapter_id} is done; `tpucourse progress` shows what is next"]
    entry = data["exercises"].get(exercise.key, {})
    status = state.exercise_status(course.root, data, exercise)
    says = status in (Status.FAILED, Status.TODO) and entry.get("message")
    lines = [f"watch: {exercise.key} is {status.words}" + (f": {entry['message']}" if says else "")]
    lines.append(f"  edit {exercise.module_path}; stuck? tpucourse hint {exercise.key}")
    return lines


def run_once(course, chapter_id: str, extra: list[str]) -> int:
    command = [sys.executable, "-m", "pytest", f"{EXERCISES}/{chapter_id}", "-x", *extra]
    print(f"watch: {' '.join(['pytest', *command[3:]])}", flush=True)
    code = subprocess.run(command, cwd=course.root).returncode
    try:
        lines = summary_after_run(course, chapter_id)
    except state.CorruptState as error:
        lines = [f"watch: {error}"]
    print("\n".join(lines), flush=True)
    return code


def main(args) -> int:
    import watchfiles

    course = commands.course_here()
    chapter_id = args.chapter
    if chapter_id is None:
        try:
            data = state.read(course.root)
        except state.CorruptState as error:
            raise commands.CommandError(str(error)) from None
        upcoming = commands.next_exercise(course, data)
        if upcoming is None:
            raise commands.CommandError("every shipped exercise is done: name a chapter, e.g. tpucourse watch ch11")
        chapter_id = upcoming.chapter
    if course.chapter(chapter_id) is None or not (course.root / EXERCISES / chapter_id).is_dir():
        raise commands.CommandError(f"no graded chapter {chapter_id!r} under exercises/")
    if args.max_runs is not None and args.max_runs < 1:
        raise commands.CommandError("--max-runs must be at least 1")

    runs = 0
    code = run_once(course, chapter_id, shlex.split(args.pytest_args))
    runs += 1
    if args.max_runs is not None and runs >= args.max_runs:
        return code
    print("watch: waiting for changes under exercises/ (Ctrl-C to stop)", flush=True)
    try:
        for _changes in watchfiles.watch(course.root / EXERCISES, watch_filter=_python_changes,
                                         debounce=300, raise_interrupt=False):
            code = run_once(course, chapter_id, shlex.split(args.pytest_args))
            runs += 1
            if args.max_runs is not None and runs >= args.max_runs:
                break
            print("watch: waiting for changes under exercises/ (Ctrl-C to stop)", flush=True)
    except KeyboardInterrupt:
        pass
    return code
