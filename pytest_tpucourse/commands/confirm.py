"""`tpucourse confirm ch11`: the chapter's done exercises checked as `tpucourse grade` checks them.

Your pytest run says an exercise is done from inside the process your code ran in, which that
code can lie to. `confirm` runs the trusted check (docs/grading.md; `pytest --isolated` runs the
same after a run) on the exercises your runs found done: inputs drawn afresh and judged by a
process that never imports your code, answered by one that does. Each verdict is kept in the
state file for the module bytes it was given (classroom/isolated.py), and `tpucourse progress`
and the site say which "done" is confirmed and which is your run's alone.
"""

from __future__ import annotations

from ..learner import shipped, state
from ..learner.requests import RequestError, course_here, read_state
from ..learner.status import Status


def add_parser(subcommands):
    c = subcommands.add_parser("confirm", help="check a chapter's done exercises outside your run's process, "
                               "as tpucourse grade does (the --isolated check); progress shows them confirmed")
    c.add_argument("target", metavar="chNN[.exercise]", help="a chapter (its done exercises) or one exercise")
    c.add_argument("--jax-cache", default=".tpucourse/jax-cache", metavar="DIR",
                   help="the compile cache the check's worker uses, as pytest's --jax-cache (default "
                   ".tpucourse/jax-cache; 'none': none)")
    return c


def run(args) -> int:
    from ..classroom import isolated

    course = course_here()
    data = read_state(course)
    exercises = _named(course, args.target)
    statuses = {e.key: state.exercise_status(course.root, data, e) for e in exercises}
    done = [e.key for e in exercises if statuses[e.key] == Status.DONE]
    changed = isolated.test_files_changed(course, done)
    checked = [key for key in done if key not in changed]
    lines = [f"{e.key}: {statuses[e.key].words}: not checked (only what your runs found done is)"
             for e in exercises if statuses[e.key] != Status.DONE]
    lines += [f"{key}: not checked: {path} differs from the course's as shipped ({shipped.MANIFEST}), whose "
              f"trusted cases are checked: {shipped.restore_advice(course.root, [path])}"
              for key, path in changed.items()]
    if not checked:
        print("\n".join(lines))
        raise RequestError(f"{args.target}: nothing done to confirm: run pytest on it first "
                           f"(tpucourse progress says where it stands)")
    print(f"the trusted check of {len(checked)} done exercise{'s' if len(checked) != 1 else ''}: inputs drawn "
          f"afresh, answered by your code in a process of its own, judged outside it ...", flush=True)
    try:
        verdicts = isolated.confirm(course, checked, args.jax_cache)
    except (OSError, ValueError) as error:
        raise RequestError(f"the trusted check could not run: {error}") from None
    agreed = 0
    for key in checked:
        verdict = verdicts.get(key) or {"verdict": "disagrees", "reason": "no verdict came back"}
        cases = f" ({verdict.get('cases')} cases)" if verdict.get("cases") else ""
        if verdict["verdict"] == "agrees":
            agreed += 1
            lines.append(f"{key}: confirmed{cases}: the trusted check agrees")
        elif verdict["verdict"] == "disagrees":
            lines.append(f"{key}: not confirmed: the trusted check disagrees{cases}: {verdict.get('reason')}")
        else:
            lines.append(f"{key}: not confirmed: the trusted check cannot check it: {verdict.get('reason')}")
    lines.append(f"{args.target}: {agreed} of {len(checked)} checked confirmed; `tpucourse progress` shows which "
                 f"done is confirmed")
    print("\n".join(lines))
    return 0 if agreed == len(checked) else 1


def _named(course, target: str):
    """The exercises `chNN` or `chNN.exercise` names."""
    chapter_id, _, name = target.partition(".")
    chapter = course.chapter(chapter_id)
    if chapter is None or not chapter.exercises:
        raise RequestError(f"{target}: no chapter with exercises of that name (e.g. ch11, ch11.matmul)")
    if not name:
        return list(chapter.exercises)
    exercise = chapter.exercise(name)
    if exercise is None:
        raise RequestError(f"{chapter.id} has no exercise {name!r}; it has "
                           f"{', '.join(e.name for e in chapter.exercises)}")
    return [exercise]
