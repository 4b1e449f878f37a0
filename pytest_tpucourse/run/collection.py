"""Collection: the markers checked, gate tests selected, graded tests in course order, and what
the run holds.

Progress learns every collected and deselected test (an exercise with a deselected test is
never done) and whether each graded test file is the course's as shipped (learner/shipped.py).
Tests deselected on a pytest-xdist worker (-k, --lf) are invisible to the controller, so each
worker hands their ids back at its end (lifecycle.py) and the controller counts them too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..gates import markers
from ..learner import foreign_plugins, run_markers, shipped
from . import host_cpu
from .options import OPTIONS
from .session import SESSION, CourseSession, run_chip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    options = config.stash[OPTIONS]
    markers.check(items, options.registry, run_chip(config))
    markers.select_gate_tests(config, items, gates_only=options.gates)
    session = config.stash.get(SESSION, None)
    if session is not None:
        collected(session, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash.get(SESSION, None)
    if run is None:
        return
    run.guard.watch_loaded()  # the toolkit the graded tests imported, before graded code runs
    host_cpu.place(session, run)  # on a TPU: the tests placed on the host's CPU start there now
    graded = [item for item in session.items if run.progress.exercise_of(item.nodeid) is not None]
    run.foreign_fixtures = foreign_plugins.foreign_fixtures(
        graded, lambda path: shipped.is_shipped_conftest(run.course.root, path))


def pytest_deselected(items) -> None:
    run = items[0].config.stash.get(SESSION, None) if items else None
    if run is None:
        return
    ids = [item.nodeid for item in items]
    run.deselected_here.extend(ids)
    run.progress.deselected(ids)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    run = node.config.stash.get(SESSION, None)
    if run is not None:
        run.progress.collected(ids)


def collected(session: CourseSession, items: list[pytest.Item]) -> None:
    """Graded tests in course order; progress learns what this run holds, and which of its
    graded test files are the course's as shipped."""
    session.progress.sort_in_course_order(items)
    session.progress.collected(item.nodeid for item in items)
    files: dict[str, dict[str, bytes]] = {}  # exercise key -> {test file: bytes as collected}
    for item in items:
        exercise = session.progress.exercise_of(item.nodeid)
        if exercise is not None:
            relative = item.nodeid.split("::", 1)[0]
            if relative not in files.setdefault(exercise.key, {}):
                files[exercise.key][relative] = Path(item.path).read_bytes()
    if session.marker is not None:
        run_markers.collected(session.marker, [f for found in files.values() for f in found])
    if not (files and session.tree.is_learners):
        return
    record = shipped.record(session.course.root)
    for key, found in files.items():
        changed = shipped.changed_from_shipped(found, record)
        session.test_files[key] = (
            {path: shipped.sha256(data) for path, data in found.items()},
            None if changed is None else not changed,
            f"{', '.join(changed)} differ{'s' if len(changed or ()) == 1 else ''} from the course's as shipped "
            f"({shipped.MANIFEST}): only the course's graded tests count "
            f"({shipped.restore_advice(session.course.root, changed)})"
            if changed else "")
