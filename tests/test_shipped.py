"""The course's record of its shipped test files (shipped.json): current, and read wherever the
course is unpacked, a clone, a folder with no git and a folder inside another repository alike."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pytest_tpucourse.commands import main, shipped as shipped_command
from pytest_tpucourse.core.course_git import is_repository_root
from pytest_tpucourse.gates import provenance
from pytest_tpucourse.learner import shipped

from .support import REPO, FakeCourse, is_xdist_variable

TESTS = """\
import numpy as np


def test_four(impl):
    x = np.arange(4.0)
    assert np.array_equal(impl.double.double(x), 2 * x)
"""
CHANGED = "def test_four(impl):\n    pass\n"


def test_the_courses_record_is_current():
    """shipped.json holds every graded test file and conftest.py of the course as they are: after changing
    one, `tpucourse shipped` writes the record again."""
    assert shipped_command.stale(REPO) == [], "shipped.json is not current: run `tpucourse shipped` and commit it"


def test_a_record_that_is_not_current_is_named_file_by_file(pytester, capsys):
    course = FakeCourse(pytester)
    course.test_file(TESTS)
    root = pytester.path
    assert main.main(["shipped", "--root", str(root)]) == 0
    assert json.loads((root / shipped.MANIFEST).read_text())["files"].keys() == {"exercises/ch11/test_double.py"}
    assert main.main(["shipped", "--check", "--root", str(root)]) == 0
    course.test_file(CHANGED)
    course.test_file(TESTS, name="test_more.py")
    (root / "conftest.py").write_text("collect_ignore = []\n")
    capsys.readouterr()
    assert main.main(["shipped", "--check", "--root", str(root)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "conftest.py: not in shipped.json", "exercises/ch11/test_more.py: not in shipped.json",
        "exercises/ch11/test_double.py: changed since shipped.json was written",
        "shipped.json: not current: `tpucourse shipped` writes it"]


def test_line_endings_do_not_change_a_shipped_file():
    assert shipped.changed_from_shipped({"t.py": b"a\r\nb\r\n"}, {"t.py": shipped.digest(b"a\nb\n")}) == []
    assert shipped.changed_from_shipped({"t.py": b"a\nc\n"}, {"t.py": shipped.digest(b"a\nb\n")}) == ["t.py"]
    assert shipped.changed_from_shipped({"t.py": b""}, None) is None  # no record: unknown


def _git(folder, *args):
    subprocess.run(["git", "-c", "user.email=c@c", "-c", "user.name=c", *args], cwd=folder, check=True,
                   capture_output=True)


def _placed(pytester, tmp_path, placement: str):
    """The fake course, its record written, where a learner may unpack it: the root of its own clone,
    a folder with no git, or a folder inside another repository that committed it."""
    course = FakeCourse(pytester)
    course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    course.test_file(TESTS)
    shipped.write(pytester.path)
    outer = tmp_path / "outer"
    root = outer / "course" if placement == "inside another repository" else outer
    shutil.copytree(pytester.path, root)
    if placement == "clone":
        _git(root, "init", "-q")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", "the course")
    elif placement == "inside another repository":
        (outer / "notes.md").write_text("a class's repository\n")
        _git(outer, "init", "-q")
        _git(outer, "add", "notes.md")  # the course folder itself is not committed there
        _git(outer, "commit", "-qm", "the class")
    return root


def _pytest(root):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
           and not is_xdist_variable(k)}
    env.update(HOME=str(root.parent), PY_COLORS="0")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "exercises"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)


def _entry(root) -> dict:
    return json.loads((root / ".tpucourse" / "state.json").read_text())["exercises"]["ch11.double"]


@pytest.mark.parametrize("placement", ["clone", "no git", "inside another repository"])
def test_the_course_grades_alike_wherever_it_is_unpacked(pytester, tmp_path, placement):
    """Honest work counts in each placement; a changed test file is refused in each, with advice that
    fits it (git only where the course is its repository's root and HEAD holds the shipped file)."""
    root = _placed(pytester, tmp_path, placement)
    assert is_repository_root(root) == (placement == "clone")
    done = _pytest(root)
    assert "1 passed" in done.stdout, done.stdout[-3000:]
    assert _entry(root)["status"] == "done" and _entry(root)["tests_shipped"] is True
    (root / "exercises" / "ch11" / "test_double.py").write_text(CHANGED)
    void = _pytest(root)
    assert "1 passed" in void.stdout and _entry(root)["status"] == "not counted", void.stdout[-3000:]
    advice = ("git checkout -- exercises/ch11/test_double.py restores it" if placement == "clone" else
              "copy it back from a fresh copy of the course (shipped.json records the shipped bytes)")
    assert (f"exercises/ch11/test_double.py differs from the course's as shipped (shipped.json): only the "
            f"course's graded tests count ({advice})") in " ".join(void.stdout.split()), void.stdout[-3000:]


def test_a_course_inside_another_repository_takes_no_commit_of_it(tmp_path, monkeypatch):
    """A gate row's and a gradebook's commit is the course's own: a course folder inside another
    repository has none (unless TPUCOURSE_GIT_COMMIT states it), never the enclosing repository's HEAD."""
    monkeypatch.delenv(provenance.COMMIT_VARIABLE, raising=False)
    outer = tmp_path / "outer"
    (outer / "course").mkdir(parents=True)
    (outer / "course" / "kernel.py").write_text("v = 1\n")
    _git(outer, "init", "-q")
    _git(outer, "add", "-A")
    _git(outer, "commit", "-qm", "the class")
    assert provenance.git_state(outer)[0] is not None
    assert provenance.git_state(outer / "course") == (None, None)
    monkeypatch.setenv(provenance.COMMIT_VARIABLE, "c" * 40)
    assert provenance.checkout_commit(outer / "course") == ("c" * 40, False, True)
    from types import SimpleNamespace

    from pytest_tpucourse.classroom import gradebook

    assert gradebook.course_facts(SimpleNamespace(root=outer / "course"), ["ch11"])["commit"] is None
    assert gradebook.course_facts(SimpleNamespace(root=outer), ["ch11"])["commit"] == provenance.git_state(outer)[0]


def test_confirm_leaves_out_an_exercise_whose_test_file_is_not_the_courses(pytester):
    """`tpucourse confirm` checks the trusted cases of the shipped test file only: a changed one is
    named, with the advice that fits a folder with no git."""
    from pytest_tpucourse.classroom import isolated
    from pytest_tpucourse.core.course import load_course

    FakeCourse(pytester).test_file(TESTS)
    shipped.write(pytester.path)
    course = load_course(pytester.path)
    assert isolated.test_files_changed(course, ["ch11.double"]) == {}
    (pytester.path / "exercises" / "ch11" / "test_double.py").write_text(CHANGED)
    assert isolated.test_files_changed(course, ["ch11.double"]) == {"ch11.double": "exercises/ch11/test_double.py"}
    assert shipped.restore_advice(pytester.path, ["exercises/ch11/test_double.py"]).startswith(
        "copy it back from a fresh copy of the course")
