"""`tpucourse progress`, `hint`, `solution` and `reset`: where am I, what next, show me, start over.

Results come only from the state file the plugin writes after each pytest run of
the learner's exercises/ tree (state.py); gate statuses only from the gate records
(gates/records.py, gates/report.py). Nothing here runs a test or infers a pass.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

from ..core.course import (
    EXERCISES,
    Course,
    CourseDataError,
    Exercise,
    find_course_root,
    load_course,
    module_in_tree,
)
from ..gates import criteria
from ..gates import records as rec
from ..gates import report
from ..learner import run_markers, self_test, state
from ..learner.next_up import next_exercise, shipped
from ..learner.progress import compiler_unchecked_note
from ..learner.status import Status


class CommandError(Exception):
    """What the learner asked for cannot be done; the message says why."""


def course_here(start: Path | None = None) -> Course:
    root = find_course_root(Path(start or Path.cwd()))
    if root is None:
        raise CommandError(f"no course.toml at or above {Path(start or Path.cwd()).resolve()}: "
                           "run tpucourse inside the course checkout")
    try:
        return load_course(root)
    except CourseDataError as error:
        raise CommandError(f"course data: {error}") from None


def _read_state(course: Course) -> dict:
    try:
        return state.read(course.root)
    except state.CorruptState as error:
        raise CommandError(str(error)) from None


# ---------------------------------------------------------------- progress

def progress_lines(course: Course, data: dict, gates: report.LearnerGates) -> list[str]:
    lines = [f"{course.title}  (from your pytest runs of exercises/; gates from {rec.DEFAULT_PATH})", ""]
    complete = 0
    for chapter in course.chapters:
        kind = "layer" if chapter.kind == "layer" else f"stage {chapter.stage}"
        head = f"{chapter.id}  {chapter.title:<28} {kind:<8}"
        graded = [e for e in chapter.exercises if shipped(course, e)]
        if not graded:
            head += "  no exercises yet"
        else:
            statuses = [state.exercise_status(course.root, data, e) for e in graded]
            done = statuses.count(Status.DONE)
            head += f"  {done}/{len(graded)} exercises"
            if done == len(graded):
                complete += 1
        if chapter.gate is not None:
            head += f"  gate {chapter.gate:02d}: {gates.label(chapter.gate)}"
        lines.append(head)
        for exercise in graded:
            status = state.exercise_status(course.root, data, exercise)
            entry = data["exercises"].get(exercise.key, {})
            line = f"      {status.mark}  {exercise.name}"
            if status in (Status.FAILED, Status.TODO) and entry.get("message"):
                failed = entry.get("tests_failed", 0)  # todo tests included: a TODO's are all todo
                said = "todo" if status == Status.TODO else "failed"
                line += f": {entry['message']}" + (f"  [{failed} tests {said}]" if failed > 1 else "")
            elif status == Status.CHANGED:
                line += ": passed, then edited: run its tests again"
            elif status == Status.NOT_COUNTED:
                unearned = state.why_not_from_a_run(data, exercise.key)
                line += (f": not from a run ({unearned}): run its tests again" if unearned
                         else f": not counted: {entry.get('message')}")
            elif status == Status.DONE and entry.get("compiler_unchecked", [0])[0]:
                line += f": {compiler_unchecked_note(*entry['compiler_unchecked'])}"
            if data.get("solutions_read", {}).get(exercise.key, {}).get("before_done"):
                line += "  (its solution was read before it was done)"
            elif status == Status.PARTIAL:
                line += f": {entry.get('tests_passed')}/{entry.get('tests_total')} tests passed, the rest not run"
            lines.append(line)
        if chapter.can_you:
            lines.append(f"      {self_test.summary(chapter, data)}")
    lines.append("")
    lines += [f"WARNING: {run.describe()}" for run in run_markers.ended_without_summary(course.root)]
    lines.append(f"your progress: {complete}/{course.chapters_total} chapters")
    lines.append(f"gates: {gates.passed()}/{len(criteria.GATES)} gates passed (measured on hardware)")
    lines += gates.notes()
    upcoming = next_exercise(course, data)
    if upcoming is None:
        lines.append("next: every shipped exercise is done")
    else:
        lines.append(f"next: {upcoming.key}: {upcoming.summary}")
        lines.append(f"  edit  {upcoming.module_path}")
        lines.append(f"  run   pytest {upcoming.test_path}")
        lines.append(f"  stuck? tpucourse hint {upcoming.key}")
    return lines


def progress(args) -> int:
    course = course_here()
    data = _read_state(course)
    print("\n".join(progress_lines(course, data, report.learner_gates(course.root))))
    return 0


# ---------------------------------------------------------------- hint

def resolve_exercise(course: Course, data: dict, target: str | None) -> Exercise:
    """`ch11.matmul`, `ch11` (its next unfinished exercise) or nothing (the course's next)."""
    if target is None:
        found = next_exercise(course, data)
        if found is None:
            raise CommandError("every shipped exercise is done: name one, e.g. tpucourse hint ch11.matmul")
        return found
    chapter_id, _, name = target.partition(".")
    chapter = course.chapter(chapter_id)
    if chapter is None:
        raise CommandError(f"no chapter {chapter_id!r}: chapters are "
                           f"{course.chapters[0].id}-{course.chapters[-1].id}")
    if not name:
        if not chapter.exercises:
            raise CommandError(f"{chapter.label} has no exercises yet")
        return next_exercise(course, data, chapter.id) or chapter.exercises[-1]
    exercise = chapter.exercise(name)
    if exercise is None:
        raise CommandError(f"{chapter.id} has no exercise {name!r}; it has "
                           f"{', '.join(e.name for e in chapter.exercises) or 'none yet'}")
    return exercise


def hint(args) -> int:
    course = course_here()
    data = _read_state(course)
    exercise = resolve_exercise(course, data, args.exercise)
    hints = exercise.hints
    total = len(hints)
    if not args.all and state.exercise_status(course.root, data, exercise) == Status.DONE:
        upcoming = next_exercise(course, data)
        print(f"{exercise.key} is done: its tests passed. `tpucourse hint {exercise.key} --all` still lists "
              f"its {total} hints; `tpucourse solution {exercise.key}` shows the course's solution.")
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


# ---------------------------------------------------------------- solution

def solution(args) -> int:
    """Print an exercise's shipped solution: once a run has seen the exercise done, or with
    --force, which the state file keeps and `tpucourse progress` shows."""
    course = course_here()
    data = _read_state(course)
    if "." not in (args.exercise or ""):
        raise CommandError(f"give chNN.exercise, e.g. ch11.matmul (got {args.exercise!r})")
    exercise = resolve_exercise(course, data, args.exercise)
    path = course.root / exercise.solution_path
    if not path.is_file():
        raise CommandError(f"{exercise.solution_path} is not in this checkout")
    status = state.exercise_status(course.root, data, exercise)
    if status != Status.DONE and not args.force:
        raise CommandError(
            f"{exercise.key} is {status.words}: its solution is shown once a run of exercises/ sees it "
            f"done. `tpucourse hint {exercise.key}` helps; `--force` shows it now, and "
            f"`tpucourse progress` will say so")
    stamp = {"date": state.now(), "before_done": status != Status.DONE}
    state.update(course.root, lambda d: d.setdefault("solutions_read", {}).setdefault(exercise.key, stamp))
    print(f"# {exercise.solution_path}" + ("  (read before the exercise was done)" if stamp["before_done"] else ""))
    print(path.read_text(encoding="utf-8"), end="")
    return 0


# ---------------------------------------------------------------- reset

def shipped_stub(course: Course, relative: str) -> bytes:
    """The file as committed in git HEAD."""
    try:
        inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=course.root,
                                capture_output=True, text=True)
    except FileNotFoundError:
        raise CommandError("reset needs git (the shipped stubs are the ones in git HEAD), "
                           "and git is not installed") from None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise CommandError(f"{course.root} is not a git checkout, so the shipped stub is unknown: "
                           "clone the course with git to use reset")
    shown = subprocess.run(["git", "show", f"HEAD:{relative}"], cwd=course.root, capture_output=True)
    if shown.returncode != 0:
        raise CommandError(f"{relative} is not in git HEAD: there is no shipped version to restore")
    return shown.stdout


def reset(args, stdin=None) -> int:
    stdin = stdin or sys.stdin
    course = course_here()
    chapter_id, _, name = args.exercise.partition(".")
    if not name or course.chapter(chapter_id) is None:
        raise CommandError(f"give chNN.module, e.g. ch11.matmul (got {args.exercise!r})")
    relative = module_in_tree(EXERCISES, chapter_id, name)
    target = course.root / relative
    stub = shipped_stub(course, relative)
    if target.exists() and target.read_bytes() == stub:
        print(f"{relative} is already as shipped")
        return 0
    if target.exists() and not args.yes:
        if not stdin.isatty():
            raise CommandError(f"{relative} holds your work: pass --yes to overwrite it "
                               "(it is backed up first); not asking on a non-interactive input")
        print(f"Overwrite {relative} with the shipped stub? Your version is backed up first. [y/N] ",
              end="", flush=True)
        if stdin.readline().strip().lower() not in ("y", "yes"):
            print("left as it is")
            return 1
    if target.exists():
        backups = course.root / state.STATE_DIR / "backups"
        backups.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        backup = backups / f"{chapter_id}.{name}-{stamp}.py"
        state.atomic_write_text(backup, target.read_text(encoding="utf-8"))
        print(f"your version is in {backup.relative_to(course.root)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    state.atomic_write_text(target, stub.decode("utf-8"))
    print(f"{relative} is back as shipped")
    return 0


def tick(args) -> int:
    """`tpucourse tick chNN [N] [--undo]`: a chapter's self-test items, ticked in the learner's word."""
    course = course_here()
    chapter = course.chapter(args.chapter)
    if chapter is None:
        raise CommandError(f"no chapter {args.chapter!r}: chapters are "
                           f"{course.chapters[0].id}-{course.chapters[-1].id}")
    if not chapter.can_you:
        raise CommandError(f"{chapter.label} has no self-test items")
    if args.item is not None:
        if not 1 <= args.item <= len(chapter.can_you):
            raise CommandError(f"{chapter.id} has items 1-{len(chapter.can_you)}, not {args.item}")

        def change(data):
            items = self_test.ticked(data, chapter.id)
            (items.discard if args.undo else items.add)(args.item)
            data["ticks"][chapter.id] = sorted(items)

        state.update(course.root, change)
    data = _read_state(course)
    print(f"{chapter.label}, can you ... (your word: ticks are self-reported, never checked)")
    for number, text in enumerate(chapter.can_you, 1):
        mark = "x" if number in self_test.ticked(data, chapter.id) else " "
        print(f"  [{mark}] {number}. {text}")
    print(self_test.summary(chapter, data))
    return 0
