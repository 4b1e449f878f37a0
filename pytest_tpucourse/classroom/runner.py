"""One graded tree: its pytest run in the tree's sandbox, and how it ended.

Each tree's run is `python -m pytest exercises/chNN ... --impl-root TREE` in the tree's
sandbox (sandbox.py: a private copy of the tree, the course read-only, no view of other
trees or of the grader's files, every process it started ended before anything is read).
Its working directory holds the end-of-run record the plugin writes; the grader reads that
record back only after the sandbox is empty, and only when it carries the token the grader
gave this run alone. How a run ends:

- finished: the process ended by itself, with a record whose token and exit status match;
- crashed: it ended without one (os._exit at import, a segfault, a usage error), or with
  another exit status than the record says: the exit status and its first and last lines are kept;
- timeout: it ran past its wall limit, or its record was written but the process did not
  end within EXIT_GRACE_SECONDS after it (a thread or child process that never ends);
- refused: the tree was not run (a link out of the tree, a tree too large to copy).

Whatever a tree hands back is read within bounds (its record: JSON nested at most RECORD_DEPTH
deep), and an error grading one tree that nothing foresaw is that tree's crashed row
(`unforeseen`; trees.py), never the class's grading.

Where the grading has the trusted check (`GradingRun.trusted`, trusted_check.TrustedCheck), its
worker runs after the pytest run, in the same sandbox (the runner `check_tree` is given: a
fresh process, the tree's private copy as its pytest run left it); its verdicts are computed
in the grader's process and kept as `TreeRun.trusted`. A run that did not finish, or that the
plugin ended for a thread that never ends, gets none (it is not done whatever its values).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..core import untrusted_json
from .record import FORMAT, RESULTS_OPTION, TOKEN_FD_ENV
from .sandbox import CourseView, Isolation, SandboxedRun, TreeSandbox

EXIT_GRACE_SECONDS = 30.0  # from the record's writing to the process's end: shutdown, on a loaded machine too
RECORD = "results.json"
HYPOTHESIS_PROFILE = "ci"  # every option drawn, derandomized: what a learner's `dev` runs skip
OUTCOMES = ("finished", "crashed", "timeout", "refused")
RECORD_DEPTH = 8  # the plugin's record nests 4 deep (exercises, an exercise, its fields)


@dataclass(frozen=True)
class TreeRun:
    """How one tree's process ended, and its record when it finished."""

    tree: str
    outcome: str  # one of OUTCOMES
    seconds: float
    returncode: int | None  # None: killed by the grader, or never run
    record: dict | None = None
    message: str = ""  # why it crashed, timed out or was refused
    log: tuple[str, ...] = ()  # the first and last lines it printed (a crash or timeout)
    trusted: dict | None = None  # exercise -> the trusted check's verdict (trusted_check.Verdict.as_dict)

    @property
    def finished(self) -> bool:
        return self.outcome == "finished"


@dataclass(frozen=True)
class GradingRun:
    """What every tree's run shares: the course, the chapters, the limits, the caches, the sandbox."""

    course_root: Path
    chapters: tuple[str, ...]
    timeout: float
    jax_cache: str  # the shared compile cache's folder (each tree's run uses a private copy), or "none"
    isolation: Isolation = Isolation.none()
    view: CourseView | None = None  # what every sandbox sees of the machine (None: CourseView.of the course)
    exit_grace: float = EXIT_GRACE_SECONDS
    extra_args: tuple[str, ...] = field(default=())
    trusted: object = None  # a trusted_check.TrustedCheck: each tree's values judged outside its process

    def course_view(self) -> CourseView:
        return self.view or CourseView.of(self.course_root)

    @property
    def shared_cache(self) -> Path | None:
        return None if self.jax_cache == "none" else Path(self.jax_cache)

    def command(self, tree: Path, work: Path) -> list[str]:
        """The pytest command line of a tree's run; everything it writes goes under `work`."""
        targets = [str(self.course_root / "exercises" / chapter) for chapter in self.chapters]
        return [sys.executable, "-m", "pytest", *targets, "--rootdir", str(self.course_root),
                "--impl-root", str(tree), "-p", "no:cacheprovider", f"--basetemp={work / 'basetemp'}",
                RESULTS_OPTION, str(work / RECORD), "--jax-cache", self.jax_cache,
                "--hypothesis-profile", HYPOTHESIS_PROFILE, "-q", *self.extra_args]

    def sandbox(self, tree: Path, folder: Path, stop: threading.Event | None = None) -> TreeSandbox:
        return TreeSandbox(tree, folder, self.course_view(), self.isolation, shared_cache=self.shared_cache,
                           stop=stop)


def grade_tree(run: GradingRun, tree_name: str, tree: Path, folder: Path,
               stop: threading.Event | None = None) -> TreeRun:
    """Grade one tree in its sandbox, whose files all live in `folder` (removed after)."""
    with run.sandbox(tree, folder, stop) as sandbox:
        if sandbox.refused:
            return TreeRun(tree_name, "refused", 0.0, None, message=f"not graded: {sandbox.refused}")
        token = secrets.token_hex(16)
        ran = sandbox.run(run.command(sandbox.tree_path, sandbox.work), timeout=run.timeout,
                          secrets_by_fd={TOKEN_FD_ENV: token.encode("ascii")}, hand_back=(RECORD,),
                          ended_when=RECORD, exit_grace=run.exit_grace)
        tree_run = how_it_ended(tree_name, ran, token)
        if run.trusted is not None and _checkable(tree_run) and not (stop is not None and stop.is_set()):
            tree_run = dataclasses.replace(tree_run, trusted=_trusted_verdicts(run.trusted, sandbox, run.timeout))
        return tree_run


def _trusted_verdicts(check, sandbox: TreeSandbox, timeout: float) -> dict[str, dict]:
    """The trusted check's verdicts for the tree in `sandbox`; where judging what its worker handed back
    fails for a reason nothing foresaw, every exercise disagrees, saying why (never the class's grading)."""
    try:
        verdicts = check.check_tree(sandbox, timeout=timeout)
    except Exception as error:  # what the tree handed back broke the judging: its own verdicts, not the class's
        why = f"its worker's answers could not be judged ({type(error).__name__}: {error})"[:600]
        return {key: {"verdict": "disagrees", "cases": 0, "reason": why} for key in check.exercises}
    return {key: verdict.as_dict() for key, verdict in verdicts.items()}


def unforeseen(tree_name: str, error: Exception) -> TreeRun:
    """A tree whose grading failed for a reason nothing here foresaw: its own crashed row, saying
    why, so that one tree never costs the class its gradebook."""
    return TreeRun(tree_name, "crashed", 0.0, None,
                   message=f"grading this tree failed: {type(error).__name__}: {error}"[:500])


def _checkable(tree_run: TreeRun) -> bool:
    """A run the trusted check can add to: finished, and not ended by the plugin for a thread that never
    ends (not done whatever its values: gradebook.tree_entries)."""
    return tree_run.finished and isinstance(tree_run.record, dict) and not tree_run.record.get("threads_left")


def warm_cache(run: GradingRun, folder: Path) -> TreeRun | None:
    """Fill the shared compile cache from one sandboxed run of the course's own solutions, the only
    code whose compiled programs every tree may read: each tree's run starts from a copy of it.
    How that run ended (None: no cache to fill, or trees that write it themselves)."""
    solutions = run.course_root / "solutions"
    if run.shared_cache is None or not run.isolation.isolated or not solutions.is_dir():
        return None
    with run.sandbox(solutions, folder) as sandbox:
        token = secrets.token_hex(16)
        ran = sandbox.run(run.command(sandbox.tree_path, sandbox.work), timeout=run.timeout,
                          secrets_by_fd={TOKEN_FD_ENV: token.encode("ascii")}, hand_back=(RECORD,),
                          ended_when=RECORD, exit_grace=run.exit_grace)
        if sandbox.cache_copy is not None:
            _add_new_files(sandbox.cache_copy, run.shared_cache)
        return how_it_ended("solutions", ran, token)


def _add_new_files(source: Path, target: Path) -> None:
    """Copy the regular files of `source` that `target` lacks (each written whole, by rename)."""
    for here, _folders, files in os.walk(source):
        there = target / Path(here).relative_to(source)
        for name in files:
            path = Path(here) / name
            if path.is_symlink() or not path.is_file() or (there / name).exists():
                continue
            there.mkdir(parents=True, exist_ok=True)
            partial = there / f".{name}.partial"
            shutil.copyfile(path, partial, follow_symlinks=False)
            partial.replace(there / name)


def how_it_ended(tree_name: str, ran: SandboxedRun, token: str) -> TreeRun:
    """The tree's run, judged from what its sandbox handed back."""
    log = tuple(ran.stdout_log.lines() + ran.stderr_log.lines())
    if ran.killed:
        outcome = "crashed" if ran.killed == "grading interrupted" else "timeout"
        return TreeRun(tree_name, outcome, ran.seconds, None, message=ran.killed, log=log)
    record, problem = read_record(ran.files.get(RECORD), ran.missing.get(RECORD, ""), token, ran.exit_status)
    if record is None:
        return TreeRun(tree_name, "crashed", ran.seconds, ran.exit_status, message=problem, log=log)
    return TreeRun(tree_name, "finished", ran.seconds, ran.exit_status, record=record)


def ended(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {-returncode}"
    if returncode > 128:  # a sandbox's first process reports its command's signal so
        return f"exit status {returncode}: killed by signal {returncode - 128}?"
    return f"exit status {returncode}"


def read_record(data: bytes | None, why_missing: str, token: str, returncode: int) -> tuple[dict | None, str]:
    """The run's record, or None and why it does not count."""
    how = ended(returncode)
    if data is None:
        if why_missing and why_missing != "not there":
            return None, f"the process ended ({how}) with an unreadable end-of-run record: {why_missing}"
        return None, f"the process ended ({how}) without the run's end-of-run record"
    try:
        record = untrusted_json.loads(data, depth=RECORD_DEPTH)
    except untrusted_json.JsonError as error:
        return None, f"the process ended ({how}) with an unreadable end-of-run record: {error}"
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("token") != token:
        return None, f"the process ended ({how}) with an end-of-run record the plugin did not write"
    if record.get("exitstatus") != returncode:
        return None, (f"the process ended ({how}) after its run had ended with exit status "
                      f"{record.get('exitstatus')}")
    return record, ""
