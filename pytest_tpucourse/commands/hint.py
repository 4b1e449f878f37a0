"""`tpucourse hint [chNN.exercise | chNN]`: the next hint of an exercise, one at a time (the state
file counts the hints shown)."""

from __future__ import annotations

from ..learner import state
from ..learner.next_up import next_exercise
from ..learner.requests import course_here, read_state, resolve_exercise
from ..learner.status import Status


def add_parser(subcommands):
    h = subcommands.add_parser("hint", help="the next hint of an exercise, one at a time")
    h.add_argument("exercise", nargs="?", help="ch11.matmul, or ch11 for its next unfinished exercise "
                   "(default: the course's next exercise)")
    h.add_argument("--all", action="store_true", help="print every hint of the exercise")
    return h


def run(args) -> int:
    course = course_here()
    data = read_state(course)
    exercise = resolve_exercise(course, data, args.exercise)
    chapter = course.chapter(args.exercise or "")  # a chapter named, not one of its exercises
    if chapter is not None and not args.all and chapter.exercises and all(
            state.exercise_status(course.root, data, e) == Status.DONE for e in chapter.exercises):
        upcoming = next_exercise(course, data)
        count = len(chapter.exercises)
        names = ", ".join(e.name for e in chapter.exercises)
        print(f"{chapter.id} ({chapter.label}) is done: the tests of its {count} exercise{'s' if count != 1 else ''} "
              f"passed ({names}). `tpucourse hint {chapter.id}.NAME --all` still lists an exercise's hints; "
              f"`tpucourse solution {chapter.id}.NAME` shows the course's solution.")
        if upcoming is not None:
            print(f"next: {upcoming.key}: tpucourse hint {upcoming.key}")
        return 0
    hints = exercise.hints
    total = len(hints)
    if not args.all and state.exercise_status(course.root, data, exercise) == Status.DONE:
        upcoming = next_exercise(course, data)
        print(f"{exercise.key} is done: its tests passed. `tpucourse hint {exercise.key} --all` still lists "
              f"its {total} hints; `tpucourse solution {exercise.key}` shows the course's solution once "
              f"`tpucourse confirm {exercise.chapter}` has confirmed it.")
        if upcoming is not None:
            print(f"next: {upcoming.key}: tpucourse hint {upcoming.key}")
        return 0
    if args.all:
        print(f"{exercise.key} ({exercise.summary})")
        for number, text in enumerate(hints, 1):
            print(f"hint {number}/{total}: {text}")
        state.update(course.root, lambda d: d["hints"].__setitem__(exercise.key, total))
        return 0
    shown = {}

    def change(data):
        count = min(state.hints_shown(data, exercise.key) + 1, total)
        data["hints"][exercise.key] = count
        shown["n"] = count

    state.update(course.root, change)
    number = shown["n"]
    print(f"{exercise.key}: edit {exercise.module_path}")
    print(f"hint {number}/{total}: {hints[number - 1]}")
    if number < total:
        print(f"(run `tpucourse hint {exercise.key}` again for hint {number + 1})")
    else:
        print("(that was the last hint; `--all` lists them all; the chapter's README.md explains the idea)")
    return 0
