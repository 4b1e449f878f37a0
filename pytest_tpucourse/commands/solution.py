"""`tpucourse solution chNN.exercise`: an exercise's shipped solution, once a run has seen it done."""

from __future__ import annotations

from ..learner import state
from ..learner.requests import RequestError, course_here, read_state, resolve_exercise
from ..learner.status import Status


def add_parser(subcommands):
    o = subcommands.add_parser("solution", help="an exercise's shipped solution, once your run has seen it done")
    o.add_argument("exercise", help="chNN.exercise, e.g. ch11.matmul")
    o.add_argument("--force", action="store_true", help="show it before the exercise is done (progress says so)")
    return o


def run(args) -> int:
    """Print an exercise's shipped solution: once a run has seen the exercise done, or with
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
    if status != Status.DONE and not args.force:
        raise RequestError(
            f"{exercise.key} is {status.words}: its solution is shown once a run of exercises/ sees it "
            f"done. `tpucourse hint {exercise.key}` helps; `--force` shows it now, and "
            f"`tpucourse progress` will say so")
    stamp = {"date": state.now(), "before_done": status != Status.DONE}
    state.update(course.root, lambda d: d.setdefault("solutions_read", {}).setdefault(exercise.key, stamp))
    print(f"# {exercise.solution_path}" + ("  (read before the exercise was done)" if stamp["before_done"] else ""))
    print(path.read_text(encoding="utf-8"), end="")
    return 0
