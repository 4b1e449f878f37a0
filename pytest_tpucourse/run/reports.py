"""A test's report: its short message, its status letter, and how it counts towards progress.

`pytest_runtest_makereport` turns a GradingOutcome into its short message (a stub: TODO), gives
a gate test the outcome its results say, and a graded failure repeating an earlier test's one
line pointing there. `ReportCounter` counts each logged report into the run's progress, where
the course made it (docs/earned.md): a pass only where the graded call's wrapper saw the test
return (graded_call.py), a skip only where the course or a graded test file made it. It is an
object registered with the session, since pytest calls `pytest_runtest_logreport` with the
report alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..core.outcomes import first_line
from ..core.paths import shown
from ..gates import markers
from ..grading import backend, leftovers
from ..grading.messages import assertion_report, outcome_report, same_failure
from .session import CALL_SEEN, GATE_RESULTS, SESSION, CourseSession

_PACKAGE = Path(__file__).resolve().parents[1]  # the package


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test that ended in a GradingOutcome reports its short message (a stub: TODO)."""
    report = yield
    session = item.config.stash.get(SESSION, None)
    if call.when == "call":  # how the session saw the call end, for a controller under pytest-xdist
        report.tpucourse_call = item.stash.get(CALL_SEEN, None)
    if report.skipped and call.excinfo is not None and session is not None:
        report.tpucourse_skip_by = skip_made_by(session, item, call.excinfo.value)
    found = outcome_report(call.excinfo.value) if call.excinfo else None
    if found is None and call.excinfo is not None and session is not None and _graded_test(session, item):
        found = assertion_report(call.excinfo.value, item.path, session.course.root)
    if found is not None:
        report.longrepr, report.tpucourse_todo, report.tpucourse_headline = found
    gate = markers.gate_number(item) if session is not None and session.options.gates else None
    if gate is not None:  # for the gate run's progress (gate_progress.py), from any process
        report.tpucourse_gate = gate
        if call.when == "call":
            report.tpucourse_timed = sum(1 for r in item.stash.get(GATE_RESULTS, ())  # measurements with a time
                                         if any(row.is_timing for row in r.rows))
    if call.when == "call" and report.passed and session is not None:
        _gate_outcome(session, item, report)  # a gate test that returned takes the outcome its results say
    edits = markers.edits_file(item)
    if edits is not None:
        report.tpucourse_edits = edits  # what the learner fixes when this test fails
    if report.failed and session is not None:
        _headline(session, item, report, outcome=found is not None)
        if call.when == "call":
            backend.reset_after_failure()  # a failing kernel's simulated TPU state must not leak
    return report


def _graded_test(session: CourseSession, item: pytest.Item) -> bool:
    """Whether the test is one of the course's graded test files (exercises/chNN/test_*.py)."""
    return Path(item.path).resolve().is_relative_to((session.course.root / "exercises").resolve())


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if getattr(report, "tpucourse_todo", False) and report.when == "call":
        return "todo", "T", ("TODO", {"yellow": True})
    return None


class ReportCounter:
    """Counts each logged report into the session's progress (registered with the session)."""

    def __init__(self, session: CourseSession):
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        session = self.session
        leftovers.end_forked_child()
        if session.gates.rehearsal is not None:
            session.gates.rehearsal.ended_report(report)
        if report.when == "call" and report.passed:
            seen = session.calls_seen.get(report.nodeid) or getattr(report, "tpucourse_call", None)
            if seen != "returned":
                session.progress.refuse(report.nodeid, f"reported as passed, but the course saw its test "
                                                       f"{seen or 'not run'}: a plugin changed the report")
                return
        if report.skipped:
            made_by = "an xfail" if hasattr(report, "wasxfail") else getattr(report, "tpucourse_skip_by", None)
            if made_by is not None:
                session.progress.refuse(report.nodeid, f"skipped by {made_by}, not by the course: a skip counts "
                                                       f"only where the course makes it", skipped=True)
                return
        # pytest-xdist puts "[gw0] <platform> -- Python ..." above a worker's failure text.
        message = re.sub(r"\A\[gw\d+\] [^\n]*\n", "", report.longreprtext) if report.failed else ""
        session.progress.record(report, is_todo=getattr(report, "tpucourse_todo", False),
                                message=getattr(report, "tpucourse_headline", None) or first_line(message))


def skip_made_by(session: CourseSession, item: pytest.Item, error: BaseException) -> str | None:
    """Where a skip the course did not make came from; None for the course's: the plugin's
    own (no libtpu, too few devices, gate tests off-chip), a graded test file's, or a skip
    mark written in one (not one a conftest added)."""
    caller = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if not (frame.f_locals.get("__tracebackhide__") or frame.f_globals.get("__tracebackhide__")):
            caller = Path(os.path.abspath(frame.f_code.co_filename))
        tb = tb.tb_next
    if caller is None:
        return None
    if caller.is_relative_to(_PACKAGE) or caller == Path(os.path.abspath(item.path)):
        return None
    if caller.name == "skipping.py" and "_pytest" in caller.parts:  # a skip or skipif mark
        written = []
        for holder in (getattr(item, "obj", None), getattr(item, "cls", None), getattr(item, "module", None)):
            marks = getattr(holder, "pytestmark", None) or ()
            written += marks if isinstance(marks, (list, tuple)) else [marks]  # one mark or a list
        if any(getattr(m, "name", "") in ("skip", "skipif") for m in written) \
                or str(getattr(error, "msg", "")).startswith(markers.GATE_TESTS_SKIPPED):
            return None
        return "a skip mark a plugin or conftest added"
    return shown(caller, session.course.root)


def _gate_outcome(session: CourseSession, item: pytest.Item, report: pytest.TestReport) -> None:
    """A gate test that returned normally takes the outcome its gate results say; a rehearsal's
    fails only on errors in its path."""
    from ..gates import rehearsal
    from ..gates.run import test_outcome

    outcome = rehearsal.test_outcome if session.gates.rehearsal is not None else test_outcome
    results = item.stash.get(GATE_RESULTS, ())
    decided = outcome(results)
    if decided is None:  # passed: what it measured, for `pytest -rP` (XLA's regimes, a fused program beside)
        if results:
            report.sections.append(("tpucourse gate", "\n".join(r.message for r in results)))
        return
    report.outcome, message = decided
    if report.outcome == "skipped":
        path, line, _ = item.location
        report.longrepr = (str(item.path), (line or 0) + 1, f"Skipped: {message}")
    else:
        report.longrepr = message


def _headline(session: CourseSession, item: pytest.Item, report: pytest.TestReport, outcome: bool) -> None:
    """Give a failed report its headline; a graded test failing as an earlier test of the same
    exercise did (the same report but for its numbers: another case) gets one line pointing there,
    and the earlier report lists it, instead of the whole report again."""
    crash = getattr(report.longrepr, "reprcrash", None)
    headline = getattr(report, "tpucourse_headline", None) or (
        first_line(crash.message) if crash is not None else first_line(report.longreprtext))
    report.tpucourse_headline = headline
    exercise = session.progress.exercise_of(report.nodeid)
    if not outcome or exercise is None:
        return
    key = (exercise.key, same_failure(str(report.longrepr)))
    first = session.failures_reported.setdefault(key, FirstReport(item.name, report, str(report.longrepr)))
    if first.test != item.name:
        first.also.append(item.name)
        report.longrepr = f"{headline}\n  (the same failure as {first.test} above)"
        first.report.longrepr = first.text + "\n  " + first.also_line()


@dataclass
class FirstReport:
    """The first test of an exercise to fail one way: its report says the failure once, with the
    tests after it that failed the same way (each of which shows one line pointing here)."""

    test: str
    report: object
    text: str
    also: list = field(default_factory=list)

    def also_line(self) -> str:
        names = ", ".join(self.also[:4]) + (f" and {len(self.also) - 4} more" if len(self.also) > 4 else "")
        count = len(self.also)
        return (f"The same failure in {count} more test{'s' if count != 1 else ''} of this exercise "
                f"(other cases): {names}.")
