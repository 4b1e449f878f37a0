"""The plugin's own tests: the fake_course fixture, the `chapters` marker, the mutant catch rate.

Helpers live in tests/support.py. Two markers split the suite by what a test starts:
`chapters` (the real chapters graded in subprocesses: stubs, solutions, mutants, equivalents)
and `runs` (pytest or the course's command line in a child process: every test that takes
pytester, or fake_course, which is built on it).
`pytest tests -m "not chapters and not runs"` is the quick loop while changing the package;
`pytest tests -m "not chapters" -n 2` adds the child runs.
"""

from __future__ import annotations

import os
import time

import pytest

from .chapter_runs import ChapterRunner, declared_runs, launch_at_start
from .support import FakeCourse, chromium, is_xdist_variable

pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "chapters: grades the real course's chapters in subprocesses (stubs, solutions, mutants, "
        "equivalents); the slow part of this suite, left out by -m 'not chapters'",
    )
    config.addinivalue_line(
        "markers",
        "runs: runs pytest or the course's command line in a child process (given to every test "
        "that takes pytester); left out of the quick loop by -m 'not chapters and not runs'",
    )


def pytest_collection_modifyitems(items):
    """A test that takes pytester (fake_course is built on it) runs pytest: mark it `runs`.
    The tests that read chapter runs go last, in their own order: the worker grades the
    chapters from the session's start (_chapter_runs_from_the_start) while every other test
    runs, and those tests then find their runs done."""
    for item in items:
        if "pytester" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.runs)
    reading = set(map(id, declared_runs(items)))
    items[:] = [i for i in items if id(i) not in reading] + [i for i in items if id(i) in reading]


@pytest.fixture(autouse=True)
def _child_runs_are_no_xdist_workers(request, monkeypatch):
    """Under `-n`, a `runs` test's child pytest must not inherit this worker's identity."""
    if request.node.get_closest_marker("runs"):
        for name in [name for name in os.environ if is_xdist_variable(name)]:
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _exports_kept_for_one_test():
    """The course's checks keep a call's export for the run (libtpu.exported); here a test is the run."""
    yield
    from pytest_tpucourse.compiler import libtpu

    libtpu.forget_exports()


@pytest.fixture
def fake_course(pytester: pytest.Pytester) -> FakeCourse:
    return FakeCourse(pytester)


@pytest.fixture(scope="session")
def chapter_runner(request, tmp_path_factory):
    """The warm worker that runs the real chapters' graded tests (tests/chapter_runs.py)."""
    runner = ChapterRunner(tmp_path_factory.mktemp("chapter-runs"))
    if hasattr(request.config, "workerinput"):  # a pytest-xdist worker: one run at a time each
        runner.jobs, runner.ahead = 1, False
    request.config.stash[_RUNNER] = runner
    yield runner
    runner.close()


@pytest.fixture(scope="session", autouse=True)
def _chapter_runs_from_the_start(request):
    """Every selected chapter run handed to the worker when the session's first test starts
    (chapter_runs.launch_at_start); a pytest-xdist worker hands in each run when asked."""
    if hasattr(request.config, "workerinput") or not declared_runs(request.session.items):
        return
    launch_at_start(request.getfixturevalue("chapter_runner"), request.session.items)


_RUNNER = pytest.StashKey[ChapterRunner]()
_MUTANT_CATCHES: dict[str, bool] = {}  # "chNN.name": caught by its caught_by files
_EQUIVALENTS_PASSED: dict[str, bool] = {}  # "chNN.name": passed every file that observes it
_FIRST_SUSPECTS: dict[str, bool] = {}  # "chNN.name" of a kernel chapter: its report names its cause first


def pytest_runtest_logreport(report):
    props = dict(report.user_properties)
    if report.when == "call" and "mutant" in props:
        _MUTANT_CATCHES[props["mutant"]] = bool(props["mutant_caught"])
    if report.when == "call" and "cause" in props:
        _FIRST_SUSPECTS[props["mutant"]] = props["cause"] == props["first_suspect"]
    if report.when == "call" and "equivalent" in props:
        _EQUIVALENTS_PASSED[props["equivalent"]] = bool(props["equivalent_passed"])


def pytest_terminal_summary(terminalreporter, config):
    runner = config.stash.get(_RUNNER, None)
    if runner is not None and runner.seconds:
        runs = runner.seconds
        wall = (runner.finished or time.perf_counter()) - runner.started
        terminalreporter.write_sep("=", "chapter runs")
        terminalreporter.write_line(
            f"{len(runs)} runs of the chapters' graded tests, {runner.jobs} at a time "
            f"({'python -m pytest each' if runner.spawn else 'forked from a warm worker'}): "
            f"{sum(runs.values()):.0f} s of runs in {wall:.0f} s")
        for key, seconds in sorted(runs.items(), key=lambda kv: -kv[1])[:10]:
            terminalreporter.write_line(f"  {seconds:6.1f} s  {key.split('::', 1)[-1]}")
    if not _MUTANT_CATCHES:
        return
    caught = sum(_MUTANT_CATCHES.values())
    total = len(_MUTANT_CATCHES)
    terminalreporter.write_sep("=", "mutants")
    terminalreporter.write_line(f"mutants caught: {caught}/{total} ({100 * caught / total:.0f}%)")
    for chapter in sorted({name.split(".")[0] for name in (*_MUTANT_CATCHES, *_EQUIVALENTS_PASSED)}):
        mutants = [v for k, v in _MUTANT_CATCHES.items() if k.startswith(chapter + ".")]
        equivalents = [v for k, v in _EQUIVALENTS_PASSED.items() if k.startswith(chapter + ".")]
        terminalreporter.write_line(f"  {chapter}: {sum(mutants)}/{len(mutants)} mutants caught, "
                                    f"{sum(equivalents)}/{len(equivalents)} equivalents pass")
    for name, was_caught in sorted(_MUTANT_CATCHES.items()):
        if not was_caught:
            terminalreporter.write_line(f"  ESCAPED  {name}")
    if _FIRST_SUSPECTS:
        right = sum(_FIRST_SUSPECTS.values())
        terminalreporter.write_line(f"first suspect named is the mistake: {right}/{len(_FIRST_SUSPECTS)} "
                                    f"({100 * right / len(_FIRST_SUSPECTS):.0f}%) of the kernel chapters' mutants")
        for chapter in sorted({name.split(".")[0] for name in _FIRST_SUSPECTS}):
            mine = [v for k, v in _FIRST_SUSPECTS.items() if k.startswith(chapter + ".")]
            terminalreporter.write_line(f"  {chapter}: {sum(mine)}/{len(mine)}")


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, for the pages a learner opens (skips without either)."""
    executable = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no playwright: pip install -e '.[test]' installs the version the project pins")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()
