"""`tpucourse solution chNN.exercise`: an exercise's shipped solution, once the trusted check confirmed it done.

A run's "done" is said in the process the learner's code ran in, which that code can lie to; the
solution is shown for a done exercise the trusted check confirmed (`tpucourse confirm`, `pytest
--isolated`: its values judged outside that process), or with --force, which the state file
keeps and `tpucourse progress` shows.
"""

from __future__ import annotations

from ..learner import state
from ..learner.requests import RequestError, course_here, read_state, resolve_exercise
from ..learner.status import Confirmation, Status


def add_parser(subcommands):
    o = subcommands.add_parser("solution", help="an exercise's shipped solution, once the trusted check has "
                               "confirmed it done (tpucourse confirm)")
    o.add_argument("exercise", help="chNN.exercise, e.g. ch11.matmul")
    o.add_argument("--force", action="store_true", help="show it before the exercise is confirmed done "
                   "(progress says so)")
    return o


def run(args) -> int:
    """Print an exercise's shipped solution: once the trusted check confirmed it done, or with
    --force, which the state file keeps and `tpucourse progress` shows."""
    course = course_here()
    data = read_state(course)
    if "." not in (args.exercise or ""):
        raise RequestError(f"give chNN.exercise, e.g. ch11.matmul (got {args.exercise!r})")
    exercise = resolve_exercise(course, data, args.exercise)
    path = course.root / exercise.solution_path
    if not path.is_file():
        raise RequestError(f"{exercise.solution_path} is not in this checkout")
    status = state.exercise_status(course.root, data, exercise)
    confirmed = status == Status.DONE and state.confirmation(course.root, data, exercise)[0] == Confirmation.CONFIRMED
    if not confirmed and not args.force:
        if status == Status.DONE:
            raise RequestError(
                f"{exercise.key} is done by your own run, not yet confirmed: `tpucourse confirm {exercise.chapter}` "
                f"checks it outside your run's process, as a grader does; then its solution is shown. "
                f"`--force` shows it now, and `tpucourse progress` will say so")
        raise RequestError(
            f"{exercise.key} is {status.words}: its solution is shown once a run of exercises/ sees it "
            f"done and `tpucourse confirm {exercise.chapter}` confirms it. `tpucourse hint {exercise.key}` helps; "
            f"`--force` shows it now, and `tpucourse progress` will say so")
    state.record_solution_read(course.root, exercise.key, before_done=not confirmed)
    print(f"# {exercise.solution_path}" + ("" if confirmed else "  (read before the exercise was confirmed done)"))
    print(path.read_text(encoding="utf-8"), end="")
    return 0
