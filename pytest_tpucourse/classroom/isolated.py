"""`pytest --isolated`: the trusted check of `tpucourse grade`, on one's own tree, after the run.

When the run's tests are through, every exercise that passed is checked again as a grader
checks it (trusted_check.py): a process that never imports the tree draws inputs afresh and
computes what they must give, a worker process that imports the tree answers, and an
exercise whose answers disagree is "not counted", saying why, in the summary and the state
file. The plain `pytest` a learner runs does none of this and keeps its speed.

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
