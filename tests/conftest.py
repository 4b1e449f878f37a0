"""The plugin's own tests: the fake_course fixture, the `chapters` marker, the mutant catch rate.

Helpers live in tests/support.py. `pytest tests -m "not chapters"` leaves out the suites
that grade the real chapters in subprocesses: the quick loop while changing the package.
"""

from __future__ import annotations

import pytest

from .support import FakeCourse

pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "chapters: grades the real course's chapters in subprocesses (stubs, solutions, mutants, "
        "equivalents); the slow part of this suite, left out by -m 'not chapters'",
    )


@pytest.fixture
def fake_course(pytester: pytest.Pytester) -> FakeCourse:
    return FakeCourse(pytester)


_MUTANT_CATCHES: dict[str, bool] = {}


def pytest_runtest_logreport(report):
    props = dict(report.user_properties)
    if report.when == "call" and "mutant" in props:
        _MUTANT_CATCHES[props["mutant"]] = bool(props["mutant_caught"])


def pytest_terminal_summary(terminalreporter):
    if not _MUTANT_CATCHES:
        return
    caught = sum(_MUTANT_CATCHES.values())
    total = len(_MUTANT_CATCHES)
    terminalreporter.write_sep("=", "mutants")
    terminalreporter.write_line(f"mutants caught: {caught}/{total} ({100 * caught / total:.0f}%)")
    for name, was_caught in sorted(_MUTANT_CATCHES.items()):
        if not was_caught:
            terminalreporter.write_line(f"  ESCAPED  {name}")
