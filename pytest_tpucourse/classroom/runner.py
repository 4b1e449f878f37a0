"""One graded tree, one pytest process: started in a private folder, watched, killed if it must be.

Each tree's run is `python -m pytest exercises/chNN ... --impl-root TREE` in a process
group of its own, in a folder only it is told about (its working directory, TMPDIR,
--basetemp, the end-of-run record, its JUnit file, its log). The parent reads back
only that folder's record, and only when it carries the token the parent gave this
child. How a run ends:

- finished: the process ended by itself, with a record whose token and exit status match;
- crashed: it ended without one (os._exit at import, a segfault, a usage error), or with
  another exit status than the record says: the exit status and the log's last lines are kept;
- timeout: it ran past its wall limit, or its record was written but the process did not
  end within EXIT_GRACE_SECONDS after it (a thread or child process that never ends). The
  whole process group is killed, threads and all.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .record import FORMAT, RESULTS_OPTION, TOKEN_FD_ENV

EXIT_GRACE_SECONDS = 30.0  # from the record's writing to the process's end: shutdown, on a loaded machine too
POLL_SECONDS = 0.1
LAST_LINES = 15
RECORD = "results.json"
LOG = "output.txt"
JUNIT = "junit.xml"


@dataclass(frozen=True)
class TreeRun:
    """How one tree's process ended, and its record when it finished."""

    tree: str
    outcome: str  # "finished", "crashed" or "timeout"
    seconds: float
    returncode: int | None  # None: killed by the parent
    record: dict | None = None
    message: str = ""  # why it crashed or timed out
    last_lines: tuple[str, ...] = ()
    junit_text: str = ""  # the child's JUnit file, when it wrote one
    trusted: dict | None = None  # exercise -> the trusted check's verdict (trusted_check.Verdict.as_dict)

    @property
    def finished(self) -> bool:
        return self.outcome == "finished"


@dataclass(frozen=True)
class GradingRun:
    """What every tree's run shares: the course, the chapters, the limits, the caches."""

    course_root: Path
    chapters: tuple[str, ...]
    timeout: float
    jax_cache: str  # passed to each child's --jax-cache: one folder shared by all trees, or "none"
    junitxml: bool = False
    exit_grace: float = EXIT_GRACE_SECONDS
    extra_args: tuple[str, ...] = field(default=())
    trusted: object = None  # a trusted_check.TrustedCheck: each tree's values judged outside its process
    # (tree path, stop event) -> what runs the trusted check's worker for that tree (tree_runner.py);
    # None: the stand-in without isolation, tree_runner.Unisolated
    tree_runner: object = None

    def runner_for(self, tree: Path, stop: threading.Event | None = None):
        from .tree_runner import Unisolated

        if self.tree_runner is not None:
            return self.tree_runner(tree, stop)
        return Unisolated(tree, env=clean_environment(), stop=stop)

    def command(self, tree: Path, folder: Path) -> list[str]:
        """The child's pytest command line; everything it writes goes under `folder`."""
        targets = [str(self.course_root / "exercises" / chapter) for chapter in self.chapters]
        command = [sys.executable, "-m", "pytest", *targets, "--rootdir", str(self.course_root),
                   "--impl-root", str(tree), "-p", "no:cacheprovider", f"--basetemp={folder / 'basetemp'}",
                   RESULTS_OPTION, str(folder / RECORD), "--jax-cache", self.jax_cache, "-q",
                   *self.extra_args]
        if self.junitxml:
            command += ["--junitxml", str(folder / JUNIT)]
        return command


def clean_environment() -> dict[str, str]:
    """The parent's environment, without what would reconfigure a child's pytest."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", TOKEN_FD_ENV)
            and not k.startswith("PYTEST_XDIST")}


def child_environment(folder: Path) -> dict[str, str]:
    """The parent's environment, without what would reconfigure the child's pytest, with the
    child's private temporary folder (its token goes on a pipe, run_child)."""
    env = clean_environment()
    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update({"TMPDIR": str(tmp), "PY_COLORS": "0"})
    return env


def grade_tree(run: GradingRun, tree_name: str, tree: Path, folder: Path,
               stop: threading.Event | None = None) -> TreeRun:
    """Grade one tree in a child process whose files all live in `folder` (made private here)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    return run_child(tree_name, run.command(tree.resolve(), folder), folder=folder,
                     env=child_environment(folder), token=token, limit=run.timeout,
                     exit_grace=run.exit_grace, stop=stop)


def run_child(tree_name: str, command: list[str], *, folder: Path, env: dict[str, str], token: str,
              limit: float, exit_grace: float = EXIT_GRACE_SECONDS,
              stop: threading.Event | None = None) -> TreeRun:
    """Run `command` in its own process group in `folder` and tell how it ended (`stop` set:
    killed at once, as crashed: the grading was interrupted). The child reads `token` from a
    pipe only it inherits (its descriptor in TPUCOURSE_RESULTS_TOKEN_FD): no other process's
    environment or file holds it."""
    record_path, log_path = folder / RECORD, folder / LOG
    start = time.monotonic()
    token_read, token_write = os.pipe()
    try:
        os.write(token_write, token.encode("ascii"))
        os.close(token_write)
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, cwd=folder, env={**env, TOKEN_FD_ENV: str(token_read)},
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, pass_fds=(token_read,))
    finally:
        os.close(token_read)
    record_seen = None
    why_killed = None
    try:
        while process.poll() is None:
            now = time.monotonic()
            if record_seen is None and record_path.exists():
                record_seen = now
            if stop is not None and stop.is_set():
                _kill_group(process)
                process.wait()
                return TreeRun(tree_name, "crashed", round(now - start, 2), None, message="grading interrupted")
            if now - start > limit:
                why_killed = f"ran past its limit of {limit:g} s: killed"
            elif record_seen is not None and now - record_seen > exit_grace:
                why_killed = (f"its run ended, but the process did not exit within {exit_grace:g} s "
                              f"(a thread or child process that never ends?): killed")
            if why_killed:
                _kill_group(process)
                break
            time.sleep(POLL_SECONDS)
    finally:
        _kill_group(process)  # whatever it left behind in its group, even after a clean exit
        process.wait()
    seconds = round(time.monotonic() - start, 2)
    junit = _read_text(folder / JUNIT)
    if why_killed:
        return TreeRun(tree_name, "timeout", seconds, None, message=why_killed,
                       last_lines=_last_lines(log_path), junit_text=junit)
    record, problem = _read_record(record_path, token, process.returncode)
    if record is None:
        return TreeRun(tree_name, "crashed", seconds, process.returncode, message=problem,
                       last_lines=_last_lines(log_path), junit_text=junit)
    return TreeRun(tree_name, "finished", seconds, process.returncode, record=record, junit_text=junit)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_record(path: Path, token: str, returncode: int) -> tuple[dict | None, str]:
    """The child's record, or None and why it does not count."""
    ended = f"exit status {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"the process ended ({ended}) without the run's end-of-run record"
    except (OSError, ValueError) as error:
        return None, f"the process ended ({ended}) with an unreadable end-of-run record: {error}"
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("token") != token:
        return None, f"the process ended ({ended}) with an end-of-run record the plugin did not write"
    if record.get("exitstatus") != returncode:
        return None, (f"the process ended ({ended}) after its run had ended with exit status "
                      f"{record.get('exitstatus')}")
    return record, ""


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _last_lines(path: Path) -> tuple[str, ...]:
    return tuple(line for line in _read_text(path).splitlines() if line.strip())[-LAST_LINES:]
