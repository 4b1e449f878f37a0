"""Helpers for the plugin's own tests: fake courses and runs of the real chapters."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

FAKE_COURSE_TOML = """
[course]
title = "fake course"
chapters_total = 15

[[chapters]]
id = "ch11"
title = "Pallas fundamentals"
kind = "stage"
stage = 1
gate = 1

[[chapters.exercises]]
name = "double"
function = "double"
summary = "Return 2 * x."
hints = ["multiply by two", "really, just x * 2"]
"""


class FakeCourse:
    """A one-exercise course in a pytester directory: exercises/ch11/double.py."""

    def __init__(self, pytester: pytest.Pytester):
        self.pytester = pytester
        pytester.makefile(".toml", course=FAKE_COURSE_TOML)
        pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\naddopts = "--import-mode=importlib"\n')
        for tree in ("exercises", "solutions"):
            (pytester.path / tree / "ch11").mkdir(parents=True)
        self.write("exercises", "double", 'def double(x):\n    raise NotImplementedError("write double()")\n')
        self.write("solutions", "double", "def double(x):\n    return x * 2\n")

    def write(self, tree: str, module: str, source: str) -> Path:
        path = self.pytester.path / tree / "ch11" / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    def test_file(self, source: str, name: str = "test_double.py") -> Path:
        path = self.pytester.path / "exercises" / "ch11" / name
        path.write_text(textwrap.dedent(source))
        return path

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.fixture
def fake_course(pytester: pytest.Pytester) -> FakeCourse:
    return FakeCourse(pytester)


def run_chapter(pytester: pytest.Pytester, chapter: str, *args: str,
                files: list[str] | None = None, first_failure_per_file: bool = False) -> pytest.RunResult:
    """Run the real course's graded tests of one chapter (or some of its files) in a subprocess.

    first_failure_per_file: stop grading a file at its first failure (tests/first_failure_per_file.py),
    for runs that only ask which files fail.
    """
    folder = REPO / "exercises" / chapter
    targets = [str(folder / name) for name in files] if files is not None else [str(folder)]
    with pytest.MonkeyPatch.context() as env:
        if first_failure_per_file:
            env.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
            args = ("-p", "tests.first_failure_per_file", *args)
        return pytester.runpytest_subprocess(*targets, "--rootdir", str(REPO), "-p", "no:cacheprovider",
                                             *args)


def failed_files(result: pytest.RunResult) -> set[str]:
    """Graded test files with at least one failure in a run's short summary."""
    return set(re.findall(r"^FAILED \S*?/(test_\w+\.py)::", result.stdout.str(), re.MULTILINE))


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
