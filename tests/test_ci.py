"""What CI tests: the JAX each Python's install picks is one the course was tested with, and CI's
second stage (.ci/newest-jax) gates, a timeout alone neither passing it nor failing it."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from pytest_tpucourse.core.jax_internals import READ_AGAINST

from .support import REPO

STAGE = REPO / ".ci" / "newest-jax"


def _later(version: str) -> list[str]:
    """Releases that could come after `version`: the next patch, post-release and minor."""
    v = Version(version)
    return [f"{v.major}.{v.minor}.{v.micro + 1}", f"{version}.1", f"{v.major}.{v.minor + 1}.0"]


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_each_pythons_install_picks_the_jax_it_was_tested_with(python):
    """pip picks the newest version a range allows: each Python's range must end at a version the
    course was read against (0.12.1 on 3.12 and 3.13 fails two chapters' solutions)."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    where = {"python_version": python, "python_full_version": f"{python}.0"}
    for name in ("jax", "jaxlib"):
        [allowed] = [r.specifier for r in map(Requirement, dependencies)
                     if r.name == name and (r.marker is None or r.marker.evaluate(where))]
        tested = [v for v in READ_AGAINST if allowed.contains(v)]
        assert tested, f"{name} on Python {python}: {allowed} allows no version the course was tested with"
        newest = max(tested, key=Version)
        assert not [v for v in _later(newest) + ["0.12.1"] if allowed.contains(v)], (
            f"{name} on Python {python}: {allowed} lets pip pick a version after the tested {newest}")


def _stage(budget: int, *steps: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(STAGE), sys.executable, str(budget), *steps], capture_output=True, text=True,
                          timeout=120)


def test_a_failing_step_makes_ci_red_and_runs_nothing_after_it():
    run = _stage(60, "true", "exit 3", "touch never")
    assert run.returncode == 1, run.stdout
    assert "passed in" in run.stdout and "FAILED (exit 3)" in run.stdout and "touch never" not in run.stdout


def test_every_step_passing_passes():
    run = _stage(60, "true", "true")
    assert run.returncode == 0 and run.stdout.count(": passed in ") == 2, run.stdout


def test_a_step_stopped_at_the_time_limit_is_not_checked_never_passed():
    run = _stage(2, "sleep 60", "true")
    assert run.returncode == 0, run.stdout
    assert "NOT CHECKED: stopped after" in run.stdout and "(and 1 more not run)" in run.stdout
    assert "passed" not in run.stdout
    before = _stage(0, "true", "true")
    assert before.returncode == 0
    assert before.stdout.endswith("NOT CHECKED: CI's time ran out before: true (and 1 more)\n"), before.stdout


def test_ci_runs_the_stage_on_the_solutions_and_the_tests():
    text = STAGE.read_text()
    assert "pytest exercises --solutions -n 2" in text and 'pytest tests -m \\"not chapters\\" -n 2' in text
    assert 'bash .ci/newest-jax "$second_python"' in (REPO / ".ci" / "run").read_text()
