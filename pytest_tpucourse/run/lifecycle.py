"""The run's start and end, across the processes of a pytest-xdist run (and of a run on a TPU
with a host-CPU half, run/host_cpu.py, whose children hand back what a worker does).

When the session starts: one Ctrl-C stops the run (grading/interrupts.py), the objects the start
made leave the garbage collector's walks (core/startup_heap.py), a selection that
may drop tests claims no exercise done, and the learner's own run leaves a marker until its
summary is written (learner/run_markers.py). When it finishes, a worker hands the controller
what only it saw (its deselections, the plugins hooking its reports, the graded modules it
imported, its graded test files) and the process that saw every report (a plain run, or the
controller) saves a run of exercises/ to the learner's state file.
"""

from __future__ import annotations

import pytest

from ..core import startup_heap
from ..core.paths import shown_in_text
from ..grading import unit_files
from ..grading.interrupts import CTRL_C
from ..learner import foreign_plugins, next_up, run_markers, shipped, state
from . import host_cpu
from .session import (SESSION, WORKER_DESELECTED, WORKER_FOREIGN, WORKER_IMPORTED, WORKER_TEST_FILES, WORKER_UNITS,
                      CourseSession)



def pytest_sessionstart(session: pytest.Session) -> None:
    run = session.config.stash.get(SESSION, None)
    if run is None:
        return
    CTRL_C.install()
    startup_heap.set_aside()
    if _selection_may_drop_tests(session.config):
        run.progress.some_tests_unseen()
    run.is_worker = getattr(session.config, "workerinput", None) is not None or host_cpu.is_child(session.config)
    if not run.is_worker and run.tree.is_learners:  # the learner's own run (xdist's controller or plain)
        run.unfinished = run_markers.ended_without_summary(run.course.root)
        try:
            run.marker = run_markers.start(run.course.root, run.run_id, session.config.args, run.tree.kind)
        except OSError:
            run.marker = None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    run = node.config.stash.get(SESSION, None)
    if run is not None:
        run.take_worker_output(getattr(node, "workeroutput", None) or {})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """A worker hands back what it saw; the process that saw every report (a plain run, or the
    xdist controller) saves a run of exercises/ to the state file."""
    run = session.config.stash.get(SESSION, None)
    if run is None:
        return
    run.exitstatus = int(session.exitstatus)
    root = run.course.root
    foreign = (foreign_plugins.foreign_report_hooks(session.config.pluginmanager,
                                                    lambda path: shipped.is_shipped_conftest(root, path))
               + run.foreign_fixtures)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is None and host_cpu.is_child(session.config):
        workeroutput = {}
    if workeroutput is not None:
        workeroutput[WORKER_DESELECTED] = run.deselected_here
        workeroutput[WORKER_FOREIGN] = foreign
        workeroutput[WORKER_IMPORTED] = dict(run.grading.imported)
        workeroutput[WORKER_UNITS] = run.exercise_units()
        workeroutput[WORKER_TEST_FILES] = {key: list(value) for key, value in run.test_files.items()}
        if host_cpu.is_child(session.config):
            host_cpu.hand_back(session.config, workeroutput)
        return
    _tests_as_collected(run)
    if run.gate_progress is not None:
        run.device_run_note = run.gate_progress.write_device_run()
    run.foreign = sorted(set(run.foreign) | set(foreign))
    if run.foreign:
        run.progress.count_nothing(f"plugins outside pytest's and the course's hook how tests are collected, "
                                   f"run or reported "
                                   f"({'; '.join(shown_in_text(f, root) for f in run.foreign)})")
    if run.tree.is_learners and run.progress.results and run.gates.rehearsal is None:
        try:
            state.record_results(run.course, run.progress.results, run.run_id,
                                 {**run.imported_on_workers, **run.grading.imported},
                                 units={key: unit_files.relative(files, root)
                                        for key, files in run.exercise_units().items()},
                                 worked_in=next_up.chapter_worked_in)
        except (OSError, state.CorruptState) as error:
            run.problem = f"progress not saved: {error}"


def _tests_as_collected(run: CourseSession) -> None:
    """Progress learns the graded test files once its entries exist (after the reports; under
    xdist the controller collects nothing and hears them from its workers)."""
    for key, (hashes, is_shipped, why) in run.test_files.items():
        run.progress.tests_as_collected(key, hashes, is_shipped, why)


def _selection_may_drop_tests(config: pytest.Config) -> bool:
    """--lf with known failures drops passed tests while collecting, without deselecting
    them; `file.py::test` arguments collect only part of a file. Either way no exercise
    may be claimed done."""
    if any("::" in str(arg) for arg in config.args):
        return True
    lastfailed = config.pluginmanager.get_plugin("lfplugin")
    return bool(config.getoption("lf", False) and lastfailed is not None
                and getattr(lastfailed, "lastfailed", None))
