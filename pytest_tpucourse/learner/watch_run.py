"""What a `tpucourse watch` run does inside pytest: an object registered with the session when
pytest runs with `--watch-run TOKEN` (commands/watch.py adds it; plugin.py registers it).

- The test the save most likely broke runs first (run_history.first_test: the last failure,
  then the fastest test that has caught a mistake), and its answer is written the moment it
  has one, while the rest of the file runs.
- The rest runs to the end, every failure with its own report (no `-x`: the race check that
  names the axis to mark "arbitrary" is not hidden behind a NaN report); only a function not
  written yet ends the run at its first TODO, as every other test of it would say TODO too.
- At the end each test's outcome and time go to the history, and this run's failures with
  them (under TOKEN), for the watcher to show the most telling (telling.py).

Under pytest-xdist the workers only put the chosen test first; the process that sees every
report (the controller) answers and records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..core.outcomes import first_line
from . import run_history
from .run_history import FAILED, PASSED, SKIPPED, TODO, RanTest

STOPPED_AT_TODO = "a function not written yet: its other tests would say TODO too"


class WatchRun:
    """The watch run's concern: its hooks, registered by plugin.py only with --watch-run."""

    def __init__(self, config: pytest.Config, course_root: Path, token: str):
        self.config = config
        self.course_root = course_root
        self.token = token
        self.is_worker = hasattr(config, "workerinput")
        self.session: pytest.Session | None = None
        self.first: run_history.FirstTest | None = None
        self.answered = False
        self.collected = 0
        self.results: dict[str, dict] = {}  # nodeid -> outcome, seconds, headline, report (in run order)

    @pytest.hookimpl(trylast=True)  # after the course has put the tests in course order
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        self.session = session
        self.first = run_history.first_test(run_history.read(self.course_root), [item.nodeid for item in items])
        if self.first is None:
            return
        position = next(i for i, item in enumerate(items) if item.nodeid == self.first.nodeid)
        items.insert(0, items.pop(position))
        self.collected = len(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        """Under pytest-xdist the controller collects nothing: it learns the chosen test from a worker's ids."""
        if self.first is None:
            self.first = run_history.first_test(run_history.read(self.course_root), list(ids))
            self.collected = len(ids)

    @pytest.hookimpl(trylast=True)  # after the terminal has written the test's letter
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        result = self.results.setdefault(report.nodeid, {"outcome": PASSED, "seconds": 0.0,
                                                         "headline": "", "report": ""})
        result["seconds"] += report.duration
        todo = bool(getattr(report, "tpucourse_todo", False))
        if report.failed or todo:
            if result["outcome"] != FAILED and result["outcome"] != TODO:
                result["outcome"] = TODO if todo else FAILED
                result["headline"] = getattr(report, "tpucourse_headline", None) or first_line(report.longreprtext)
                result["report"] = report.longreprtext
        elif report.skipped and result["outcome"] == PASSED:
            result["outcome"] = SKIPPED
        has_verdict = report.failed or todo or report.skipped or report.when == "call"
        if has_verdict and self.first is not None and report.nodeid == self.first.nodeid and not self.answered:
            self.answered = True
            self._answer(result)
        if todo and report.when == "call" and self.session is not None:
            self.session.shouldfail = STOPPED_AT_TODO

    def _answer(self, result: dict) -> None:
        name = self.first.nodeid.split("::", 1)[-1]
        said = {PASSED: "it passes", SKIPPED: "it is skipped", TODO: result["headline"].removeprefix("TODO: "),
                FAILED: f"it fails: {result['headline']}"}[result["outcome"]]
        others = self.collected - 1
        rest = ("" if others < 1 or result["outcome"] == TODO else
                "; the other test runs now" if others == 1 else f"; the other {others} tests run now")
        said = said.rstrip(".") if rest else said
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        line = f"watch: first answer, {name} ({self.first.why}): {said}{rest}"
        if terminal is not None:
            terminal.ensure_newline()
            terminal.write_line(line, bold=True)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        results = [RanTest(nodeid, r["outcome"], r["seconds"], r["headline"], r["report"])
                   for nodeid, r in self.results.items()]
        try:
            run_history.record_run(self.course_root, results, self.token)
        except OSError:  # the history is the watch's cache: a run never fails for it
            pass
