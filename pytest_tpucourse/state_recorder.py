"""pytest hooks that keep the state file (state.py) in step with runs of the learner's tree.

Only the process that sees every report writes it: a plain run, or the
pytest-xdist controller (never a worker). Tests deselected on an xdist worker
(`-k`, `--lf`) are invisible to the controller, so each worker sends their ids
back in its workeroutput and the controller counts them as deselected: an
exercise with deselected tests is never recorded as done. Nor is one in a run
whose selection may drop tests unseen (--lf, `file.py::test` arguments).
"""

from __future__ import annotations

import pytest

from . import state
from .progress import RunProgress

WORKER_DESELECTED = "tpucourse_deselected"


class StateRecorder:
    def __init__(self, course_root, progress: RunProgress, learner_tree: bool):
        self.course_root = course_root
        self.progress = progress
        self.learner_tree = learner_tree
        self.deselected_here: list[str] = []
        self.problem: str | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if _selection_may_drop_tests(session.config):
            self.progress.some_tests_unseen()

    def pytest_deselected(self, items) -> None:
        self.deselected_here.extend(item.nodeid for item in items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.progress.deselected(output.get(WORKER_DESELECTED, ()))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_DESELECTED] = self.deselected_here
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
