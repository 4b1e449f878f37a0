"""`pytest --isolated` and `tpucourse confirm`: the trusted check of `tpucourse grade`, on one's own tree.

When the run's tests are through, every exercise that passed is checked again as a grader
checks it (trusted_check.py): a process that never imports the tree draws inputs afresh and
computes what they must give, a worker process that imports the tree answers, and an
exercise whose answers disagree is "not counted", saying why, in the summary and the state
file. The plain `pytest` a learner runs does none of this and keeps its speed.

For the learner's own exercises/, each verdict is kept in the state file for the module bytes
it was given and the files it runs (`confirm`, state.record_confirmations, confirmed_unit.py): `tpucourse progress` then says which
"done" the trusted check confirmed and which are the learner's own run only. `tpucourse confirm
chNN` runs the same check on the chapter's done exercises without running their tests again,
from a process that never imports the tree at all.

What it shows is read back into this run's process, which is the tree's: it tells an honest
learner what a grader's check will say (a kernel right only on the tested shapes, a result
that depends on a global set elsewhere), but a tree that lies in its own process could lie
about this too. A grade that counts comes from `tpucourse grade`, whose gradebook no tree's
process writes (docs/grading.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..core.course import EXERCISES, Course
from ..grading import unit_files
from ..learner import shipped, state
from . import confirmed_unit
from ..learner.status import Status

SECONDS_PER_CHAPTER = 600.0


class IsolatedCheck:
    """A plugin: before the session saves the run (its sessionfinish is trylast), the trusted
    check of every exercise this run found done; its verdicts in the terminal summary."""

    def __init__(self, session):
        self.session = session  # the CourseSession
        self.verdicts: dict[str, dict] = {}
        self.problem = ""

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if getattr(session.config, "workerinput", None) is not None:  # the xdist controller checks
            return
        progress = self.session.progress
        done = [key for key, entry in progress.results.items() if entry.status == Status.DONE]
        if not done:
            return
        learners = self.session.tree.is_learners  # their verdicts are kept: progress says what is confirmed
        before = confirmed_unit.snapshot(self.session.course) if learners else {}
        try:
            self.verdicts = run_check(self.session.course.root, self.session.tree.root, done,
                                      self.session.options.jax_cache)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            self.problem = f"the trusted check could not run: {error}"
            self.verdicts = {key: {"verdict": "disagrees", "cases": 0, "reason": self.problem} for key in done}
        for key in done:
            verdict = self.verdicts.get(key) or {"verdict": "disagrees", "reason": "no verdict came back"}
            if verdict["verdict"] == "disagrees":
                progress.results[key].not_counted = f"the trusted check disagrees: {verdict['reason']}"
        if learners and not self.problem:
            ran = {key: list(unit_files.relative(files, self.session.course.root))
                   for key, files in self.session.exercise_units().items()}
            keep(self.session.course, self.verdicts, before, "pytest --isolated", ran)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.verdicts:
            return
        terminalreporter.write_sep("=", "tpucourse --isolated: values judged outside this process")
        for key, verdict in self.verdicts.items():
            cases = f" ({verdict.get('cases', 0)} cases)" if verdict.get("cases") else ""
            line = f"{key}: {verdict['verdict']}{cases}"
            if verdict.get("reason"):
                line += f": {verdict['reason']}"
            terminalreporter.write_line(line, red=verdict["verdict"] == "disagrees")


def run_check(course_root: Path, tree: Path, exercises: list[str], jax_cache: str) -> dict[str, dict]:
    """The verdicts of `python -m pytest_tpucourse.classroom.trusted_check` on this tree, run in a
    process that never imports the tree."""
    from .tree_runner import clean_environment

    with tempfile.TemporaryDirectory(prefix="tpucourse-isolated-") as folder:
        out = Path(folder) / "verdicts.json"
        chapters = {key.split(".")[0] for key in exercises}
        command = [sys.executable, "-m", "pytest_tpucourse.classroom.trusted_check", "--course", str(course_root),
                   "--tree", str(tree), "--exercises", ",".join(exercises), "--jax-cache", jax_cache,
                   "--out", str(out)]
        done = subprocess.run(command, cwd=folder, env=clean_environment(), capture_output=True, text=True,
                              timeout=SECONDS_PER_CHAPTER * len(chapters) + 120)
        if done.returncode != 0 or not out.is_file():
            last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
            raise ValueError(f"its process ended with exit status {done.returncode}" + (f": {last}" if last else ""))
        return json.loads(out.read_text(encoding="utf-8"))


def keep(course: Course, verdicts: dict[str, dict], before: dict[str, str], how: str,
         ran: dict[str, list] | None = None) -> None:
    """The verdicts in the learner's state file, each for the unit it was given (confirmed_unit.py:
    the module and the files it runs, `before`: exercises/ as it was when the check started); those
    of an exercise whose unit changed while it was checked are not kept (nothing says which bytes
    answered). ran: {exercise key: files relative to the course} a run counted in its unit; the
    done entries' units are counted too."""
    after = confirmed_unit.snapshot(course)
    try:
        entries = state.read(course.root)["exercises"]
    except state.CorruptState:
        entries = {}
    modules, units = {}, {}
    for key, verdict in verdicts.items():
        exercise = course.exercise(key)
        if exercise is None:
            continue
        counted = list((ran or {}).get(key, ())) + list((entries.get(key) or {}).get("unit") or ())
        unit = confirmed_unit.held(confirmed_unit.unit_paths(course, key, counted, verdict.get("files") or ()),
                                   before, after)
        if unit is not None and unit.get(exercise.module_path) is not None:
            modules[key], units[key] = unit[exercise.module_path], unit
    try:
        state.record_confirmations(course.root, {k: v for k, v in verdicts.items() if k in modules}, modules, how,
                                   units, {key: confirmed_unit.folder_of(course, key) for key in modules})
    except (OSError, state.CorruptState):
        pass  # the state file is the learner's to break: the verdicts are printed all the same


def test_files_changed(course: Course, keys) -> dict[str, str]:
    """Exercise key -> its graded test file where that file differs from the course's as shipped
    (learner/shipped.py): its trusted cases are not the course's. Empty where the course has no
    record of its shipped files (nothing to compare with)."""
    record = shipped.record(course.root)
    changed = {}
    for key in keys:
        test_path = course.exercise(key).test_path
        try:
            data = (course.root / test_path).read_bytes()
        except OSError:
            changed[key] = test_path
            continue
        if shipped.changed_from_shipped({test_path: data}, record):
            changed[key] = test_path
    return changed


def confirm(course: Course, keys: list[str], jax_cache: str, how: str = "tpucourse confirm") -> dict[str, dict]:
    """The trusted check of these done exercises of the learner's exercises/, run from a process that
    never imports the tree, each verdict kept in the state file for the module bytes it was given."""
    before = confirmed_unit.snapshot(course)
    verdicts = run_check(course.root, course.root / EXERCISES, keys, jax_cache)
    keep(course, verdicts, before, how)
    return verdicts
