"""What this run showed about each exercise, and the summary printed at its end.

Results are keyed by node id (`exercises/chNN/test_<exercise>.py::...`), which is
all a pytest-xdist controller sees of a test, so the same code serves a plain
run and a distributed one. An exercise counts as done only when every graded
test collected for it ran and passed in this run: a run that deselected some
(`-k`, `--lf`) never claims it. A skip counts as finished only where the course made it
(the plugin's own skips, a shipped test's); a pass only where the session saw the test
return (a plugin that rewrites reports cannot make one); and a run whose graded tests
differ from the course's, or with a plugin that hooks the reports, counts nothing
(`not_counted`, docs/earned.md). An exercise's failures are listed most telling first (a race
before a NaN report, telling.py), and the most telling is the message the state file keeps.

For the learner's own tree the summary counts as `tpucourse progress` does: the state
file merged with this run (the run writes it first), and "next" follows next_up.py, so
a run of one exercise, `progress` and `hint` never disagree. Other trees (--solutions,
--impl-root) are summarised from this run alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ..chips import Chip
from ..core.course import EXERCISES, Course, Exercise
from ..gates import criteria
from . import telling
from .status import Status


@dataclass
class ExerciseResults:
    exercise: Exercise
    collected: set[str] = field(default_factory=set)
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    todo: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    compiler_unchecked: dict[str, str] = field(default_factory=dict)  # skipped without libtpu: why
    deselected: set[str] = field(default_factory=set)
    unseen_tests: bool = False  # a filter (--lf, file::test ids) may have dropped tests unseen
    messages: dict[str, int] = field(default_factory=dict)  # each failure's headline: how many tests
    edits: dict[str, str] = field(default_factory=dict)  # test -> the file it grades (@pytest.mark.edits)

    def file_to_edit(self) -> str | None:
        """The file, next to the module, that every failing test of this run grades; None when
        a failure is the module's own (or nothing failed)."""
        files = {self.edits.get(nodeid) for nodeid in self.failed}
        return files.pop() if len(files) == 1 and None not in files else None
    skipped_elsewhere: set[str] = field(default_factory=set)  # skipped by code that is not the course's
    test_files: dict[str, str] = field(default_factory=dict)  # graded test file -> sha256 as collected
    tests_shipped: bool | None = None  # the test files are the course's (shipped.json); None: unknown
    not_counted: str = ""  # why passing tests of this run do not count

    def count_message(self, headline: str) -> None:
        """One more test failed with this headline; a headline that differs from an earlier one only
        in its numbers (another shape, another count) is counted as that one, said once."""
        from ..grading.messages import same_failure

        key = same_failure(headline)
        known = next((h for h in self.messages if same_failure(h) == key), headline)
        self.messages[known] = self.messages.get(known, 0) + 1

    @property
    def first_message(self) -> str:
        """The most telling failure's headline (telling.py), which the state file keeps."""
        return next(iter(self.messages_by_telling()), ("", 0))[0]

    def messages_by_telling(self) -> list[tuple[str, int]]:
        """(headline, how many tests) of each failure, the most telling first (telling.py)."""
        return telling.by_telling(self.messages.items(), headline=lambda item: item[0])

    @property
    def ran(self) -> bool:
        """Some test of this exercise ran in this run (skipped counts; deselected does not)."""
        return bool(self.passed or self.failed or self.todo or self.skipped or self.skipped_elsewhere)

    @property
    def status(self) -> Status:
        if self.todo:
            return Status.TODO
        if self.failed:
            return Status.FAILED
        if self.not_counted and self.passed:
            return Status.NOT_COUNTED
        finished = self.passed | self.skipped
        if self.passed and self.collected <= finished and not self.deselected and not self.unseen_tests:
            return Status.DONE
        if self.passed:
            return Status.PARTIAL
        return Status.NOT_RUN


class RunProgress:
    def __init__(self, course: Course):
        self.course = course
        self.results: dict[str, ExerciseResults] = {}
        self.unseen_tests = False
        self.run_not_counted = ""  # why nothing this run passed counts (a plugin hooking reports)
        # TODO headlines of graded tests outside any exercise's file (a gate test calling a stub): how many
        self.todo_elsewhere: dict[str, int] = {}

    def some_tests_unseen(self) -> None:
        """This run's selection may have dropped tests without deselecting them: claim no exercise done."""
        self.unseen_tests = True
        for entry in self.results.values():
            entry.unseen_tests = True

    def count_nothing(self, why: str) -> None:
        """Nothing this run passed counts, for `why` (said in the summary and the state file)."""
        self.run_not_counted = why
        for entry in self.results.values():
            entry.not_counted = entry.not_counted or why

    def tests_as_collected(self, key: str, files: dict[str, str], shipped: bool | None, why: str = "") -> None:
        """The graded test files of exercise `key` as this run collected them (path -> sha256);
        shipped False: they differ from the course's, and `why` says how."""
        entry = self.results.get(key)
        if entry is None:
            return
        entry.test_files, entry.tests_shipped = files, shipped
        if shipped is False:
            entry.not_counted = why

    def exercise_of(self, nodeid: str) -> Exercise | None:
        return exercise_of(self.course, nodeid)

    def sort_in_course_order(self, items: list) -> None:
        """Graded tests (pytest items) run in the order a learner meets the exercises (course.toml)."""
        rank = {exercise.key: index
                for index, exercise in enumerate(e for c in self.course.chapters for e in c.exercises)}

        def key(item) -> int:
            exercise = self.exercise_of(item.nodeid)
            return rank[exercise.key] if exercise is not None else len(rank)

        items.sort(key=key)

    def _entry(self, nodeid: str) -> ExerciseResults | None:
        exercise = self.exercise_of(nodeid)
        if exercise is None:
            return None
        return self.results.setdefault(exercise.key, ExerciseResults(exercise, unseen_tests=self.unseen_tests,
                                                                     not_counted=self.run_not_counted))

    def collected(self, nodeids) -> None:
        for nodeid in nodeids:
            entry = self._entry(nodeid)
            if entry is not None:
                entry.collected.add(nodeid)

    def deselected(self, nodeids) -> None:
        for nodeid in nodeids:
            entry = self._entry(nodeid)
            if entry is not None:
                entry.collected.discard(nodeid)
                entry.deselected.add(nodeid)

    def record(self, report, *, is_todo: bool, message: str = "") -> None:
        entry = self._entry(report.nodeid)
        if entry is None:
            if is_todo and (report.when == "call" or report.failed):
                headline = message.strip().removeprefix("TODO: ") or "not written yet"
                self.todo_elsewhere[headline] = self.todo_elsewhere.get(headline, 0) + 1
            return
        nodeid = report.nodeid
        if report.when == "call" or report.failed or report.skipped:
            if is_todo:
                entry.todo.add(nodeid)
            elif report.failed:
                entry.failed.add(nodeid)
                edits = getattr(report, "tpucourse_edits", None)
                if edits:
                    entry.edits[nodeid] = edits
            elif report.skipped and verdict_next_run(report):  # not finished: the compile's verdict is to come
                entry.skipped_elsewhere.add(nodeid)
            elif report.skipped:
                entry.skipped.add(nodeid)
                why = compiler_missing(report)
                if why:
                    entry.compiler_unchecked[nodeid] = why
            elif report.when == "call":
                entry.passed.add(nodeid)
            if is_todo or report.failed:
                entry.count_message(message.strip() or "failed")

    def refuse(self, nodeid: str, message: str, *, skipped: bool = False) -> None:
        """A report the course does not take as it says: a pass the session did not see the test
        earn (a failure), or a skip made by code that is not the course's (not finished)."""
        entry = self._entry(nodeid)
        if entry is None:
            return
        (entry.skipped_elsewhere if skipped else entry.failed).add(nodeid)
        entry.count_message(message)

    def chapters_seen(self):
        seen = {r.exercise.chapter for r in self.results.values()}
        return [c for c in self.course.chapters if c.id in seen]

    def summary_lines(self, tree_description: str, *, learner_state: dict | None = None,
                      learner_tree: bool = False, gates_passed: int | None = None,
                      only_ran: bool = False, native_chip: Chip | None = None,
                      gates_done: frozenset = frozenset()) -> list[str]:
        """The closing summary. learner_state: the learner's state file after this run was
        written to it; chapter counts and "next" then come from it (next_up.py), as in
        `tpucourse progress`. only_ran (a --gates run): leave out exercises none of whose
        tests ran, and chapters with none left, instead of listing every one as not run.
        native_chip: the chip this run's kernels ran on natively, whose next step is named too
        (a chapter's gate, unless among gates_done, the numbers of the gates passed)."""
        from . import next_up, state

        merged = learner_state is not None
        lines = [f"graded: {tree_description}"]
        shown = 0
        for chapter in self.chapters_seen():
            entries = [self.results.get(e.key) for e in chapter.exercises]
            if merged:
                shipped = [e for e in chapter.exercises if next_up.shipped(self.course, e)]
                done = sum(1 for e in shipped if state.exercise_status(self.course.root, learner_state, e)
                           == Status.DONE)
                total = len(shipped)
            else:
                done = sum(1 for e in entries if e is not None and e.status == Status.DONE)
                total = len(chapter.exercises)
            if only_ran:
                entries = [e for e in entries if e is not None and e.ran]
                if not entries:
                    continue
            shown += 1
            lines.append(f"{chapter.label}: {done}/{total} exercises")
            lines.extend(_exercise_line(entry) for entry in entries if entry is not None)
        for headline, count in self.todo_elsewhere.items():  # a gate test waiting on an exercise
            lines.append(f"  TODO  {headline}  [{_tests(count)}]")
        if shown or not only_ran:
            complete = (self._chapters_complete(learner_state) if merged
                        else sum(1 for c in self.chapters_seen()
                                 if c.exercises and all(self.results.get(e.key) is not None
                                                        and self.results[e.key].status == Status.DONE
                                                        for e in c.exercises)))
            who = "your progress" if learner_tree else "this tree, from this run"
            lines.append(f"course: {complete}/{self.course.chapters_total} chapters ({who})")
        if gates_passed is not None:
            lines.append(
                f"gates: {gates_passed}/{len(criteria.GATES)} gates passed "
                f"(measured on hardware, from the gate records)"
            )
        if merged and (shown or not only_ran):  # a gates run lists no exercises, nor what is next
            upcoming = next_up.next_exercise(self.course, learner_state)
            if upcoming is None:
                lines.append("next: every shipped exercise is done")
            else:
                lines.append(f"next: {upcoming.key}: edit {self._to_edit(upcoming)}, then pytest {upcoming.test_path}")
            on_chip = (next_up.next_on_chip(self.course, learner_state, [c.id for c in self.chapters_seen()],
                                            native_chip, gates_done) if native_chip and not only_ran else None)
            if on_chip:
                lines.append(on_chip)
        return lines

    def _to_edit(self, exercise: Exercise) -> str:
        """The exercise's module, or the file beside it that is all this run found wrong."""
        entry = self.results.get(exercise.key)
        other = entry.file_to_edit() if entry is not None else None
        return str(PurePosixPath(exercise.module_path).with_name(other)) if other else exercise.module_path

    def _chapters_complete(self, data: dict) -> int:
        from . import next_up, state

        complete = 0
        for chapter in self.course.chapters:
            shipped = [e for e in chapter.exercises if next_up.shipped(self.course, e)]
            if shipped and all(state.exercise_status(self.course.root, data, e) == Status.DONE for e in shipped):
                complete += 1
        return complete


MESSAGES_SHOWN = 3


def exercise_of(course: Course, nodeid: str) -> Exercise | None:
    """The exercise a graded test belongs to (`exercises/chNN/test_<exercise>.py::...`), or None."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    if len(parts) != 3 or parts[0] != EXERCISES:
        return None
    chapter = course.chapter(parts[1])
    return chapter.exercise_for_test_file(parts[2]) if chapter else None


def verdict_next_run(report) -> bool:
    """Whether a skip is a compile check's whose compile runs after this run (tpu_rules, answer_later)."""
    from ..compiler import libtpu

    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
    return libtpu.VERDICT_NEXT_RUN in reason


def compiler_missing(report) -> str:
    """The skip reason of a compiler check that could not run here (no libtpu, no flatbuffers), else ""."""
    from ..compiler import libtpu

    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
    lines = (libtpu.NOT_SHIPPED_LINE, libtpu.INSTALL_LINE, libtpu.FLATBUFFERS_LINE)
    return next((line for line in lines if line in reason), "")


def compiler_unchecked_note(count: int, why: str) -> str:
    """"2 compiler checks not checked here (libtpu runs on Linux x86_64 only)"."""
    checks = f"{count} compiler check" + ("" if count == 1 else "s")
    return f"{checks} {why}" if why.startswith("not checked here") else f"{checks} not run ({why})"


def _exercise_line(entry: ExerciseResults) -> str:
    ran = len(entry.passed | entry.failed | entry.todo)
    total = len(entry.collected | entry.deselected)
    if entry.status == Status.NOT_RUN and not entry.skipped:
        return f"  {entry.status.mark:4}  {entry.exercise.name:<18} not run ({_why_not_run(entry)})"
    line = f"  {entry.status.mark:4}  {entry.exercise.name:<18} {len(entry.passed)}/{total} tests passed"
    if entry.status == Status.PARTIAL:
        line += f" ({ran} ran)"
        for message, _ in entry.messages_by_telling()[:MESSAGES_SHOWN]:
            line += "\n        " + message
    if entry.status == Status.NOT_COUNTED:
        line += f", not counted: {entry.not_counted}"
    if entry.status == Status.DONE and entry.compiler_unchecked:
        line += f"; {compiler_unchecked_note(len(entry.compiler_unchecked), next(iter(entry.compiler_unchecked.values())))}"
    if entry.status in (Status.TODO, Status.FAILED):
        shown = entry.messages_by_telling()[:MESSAGES_SHOWN]
        for message, count in shown:
            line += "\n        " + message.removeprefix("TODO: ") + (f"  [{count} tests]" if count > 1 else "")
        if len(entry.messages) > MESSAGES_SHOWN:
            line += f"\n        ... and {len(entry.messages) - MESSAGES_SHOWN} more different failures"
    if entry.status == Status.TODO and entry.exercise.hints:
        line += f"\n        hint: {entry.exercise.hints[0]}"
    return line


def _tests(count: int) -> str:
    return f"{count} test" + ("" if count == 1 else "s")


def _why_not_run(entry: ExerciseResults) -> str:
    """Deselected (-k, --lf, a test id), or collected but the run ended first (-x, Ctrl-C, a crash)."""
    if not entry.collected:
        return f"{_tests(len(entry.deselected))} not selected"
    which = "its" if not entry.deselected else "the other"
    stopped = f"the run ended before {which} {_tests(len(entry.collected))} finished"
    return f"{_tests(len(entry.deselected))} not selected; {stopped}" if entry.deselected else stopped
