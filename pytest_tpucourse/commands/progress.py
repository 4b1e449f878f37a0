"""`tpucourse progress`: every chapter, gate and exercise, and what to do next.

Results come only from the state file the plugin writes after each pytest run of
the learner's exercises/ tree (state.py); gate statuses only from the gate records
(gates/records.py, gates/report.py). Nothing here runs a test or infers a pass. A done
exercise says whether the trusted check confirmed it (`tpucourse confirm`, `pytest
--isolated`: its values judged outside the process the learner's code ran in) or whether it is
the learner's own run's word only (state.confirmation).
"""

from __future__ import annotations

from ..core.course import Course
from ..gates import criteria
from ..gates import records as rec
from ..gates import report
from ..learner import run_markers, self_test, state
from ..learner.next_up import next_exercise, shipped
from ..learner.progress import compiler_unchecked_note
from ..learner.requests import course_here, read_state
from ..learner.status import Confirmation, Status


def add_parser(subcommands):
    return subcommands.add_parser("progress", help="every chapter, gate and exercise, and what to do next")


def run(args) -> int:
    course = course_here()
    data = read_state(course)
    print("\n".join(progress_lines(course, data, report.learner_gates(course.root))))
    return 0


def confirmation_words(course_root, data: dict, exercise) -> str:
    """How far a done exercise is confirmed, in a few words."""
    confirmation, reason = state.confirmation(course_root, data, exercise)
    if confirmation == Confirmation.CONFIRMED:
        return "confirmed: the trusted check agrees"
    if confirmation == Confirmation.DISAGREES:
        return f"your run only; the trusted check disagrees: {reason}"
    return f"your run only: `tpucourse confirm {exercise.chapter}` checks it outside your run's process"


def progress_lines(course: Course, data: dict, gates: report.LearnerGates) -> list[str]:
    lines = [f"{course.title}  (from your pytest runs of exercises/; gates from {rec.DEFAULT_PATH})", ""]
    complete = confirmed_chapters = 0
    for chapter in course.chapters:
        kind = "layer" if chapter.kind == "layer" else f"stage {chapter.stage}"
        head = f"{chapter.id}  {chapter.title:<28} {kind:<8}"
        graded = [e for e in chapter.exercises if shipped(course, e)]
        if not graded:
            head += "  no exercises yet"
        else:
            statuses = [state.exercise_status(course.root, data, e) for e in graded]
            done = statuses.count(Status.DONE)
            confirmed = sum(1 for e, s in zip(graded, statuses)
                            if s == Status.DONE and state.confirmation(course.root, data, e)[0] == Confirmation.CONFIRMED)
            head += f"  {done}/{len(graded)} exercises" + (f", {confirmed} confirmed" if done else "")
            if done == len(graded):
                complete += 1
                confirmed_chapters += confirmed == done
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
            if status == Status.DONE:
                line += f"  ({confirmation_words(course.root, data, exercise)})"
            read = state.solution_read(data, exercise.key)
            if read == state.SOLUTION_READ_BEFORE:
                line += "  (its solution was read before it was confirmed done)"
            elif read == state.SOLUTION_READ_TAMPERED:
                line += "  (its solution-read mark was removed or altered by hand: tampered)"
            elif status == Status.PARTIAL:
                line += f": {entry.get('tests_passed')}/{entry.get('tests_total')} tests passed, the rest not run"
            lines.append(line)
        if chapter.can_you:
            lines.append(f"      {self_test.summary(chapter, data)}")
    lines.append("")
    lines += [f"WARNING: {run.describe()}" for run in run_markers.ended_without_summary(course.root)]
    lines.append(f"your progress: {complete}/{course.chapters_total} chapters ({confirmed_chapters} confirmed by the "
                 f"trusted check: tpucourse confirm chNN)")
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
