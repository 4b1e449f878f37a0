"""pytest hooks that keep the state file (state.py) in step with runs of the learner's tree.

Only the process that sees every report writes it: a plain run, or the
pytest-xdist controller (never a worker; plugin.ProgressRecorder brings the
workers' deselections back to it). An exercise with deselected tests is never
recorded as done; nor is one in a run whose selection may drop tests unseen
(--lf, `file.py::test` arguments).
"""

from __future__ import annotations

import pytest

from .learner import state
from .learner.progress import RunProgress


class StateRecorder:
    def __init__(self, course_root, progress: RunProgress, learner_tree: bool):
        self.course_root = course_root
        self.progress = progress
        self.learner_tree = learner_tree
        self.problem: str | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if _selection_may_drop_tests(session.config):
            self.progress.some_tests_unseen()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        if hasattr(session.config, "workeroutput"):
            return
        if not self.learner_tree or not self.progress.results:
            return
        try:
            state.record_results(self.course_root, self.progress.results)
        except (OSError, state.CorruptState) as error:
            self.problem = f"progress not saved: {error}"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.problem:
            terminalreporter.write_line(f"tpucourse: {self.problem}", red=True)


def _selection_may_drop_tests(config: pytest.Config) -> bool:
    """--lf with known failures drops passed tests while collecting, without deselecting
    them; `file.py::test` arguments collect only part of a file."""
    if any("::" in str(arg) for arg in config.args):
        return True
    lastfailed = config.pluginmanager.get_plugin("lfplugin")
    return bool(config.getoption("lf", False) and lastfailed is not None
                and getattr(lastfailed, "lastfailed", None))
