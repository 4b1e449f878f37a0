"""Running one command for one tree: the contract the trusted check uses, and a runner without isolation.

The trusted check (trusted_check.py) needs one thing from whatever keeps a tree's code in its
place: run a command for that tree and hand back what it wrote. A runner has

    runner.tree                      the tree's path as the command sees it
    runner.run(command, *, inputs, hand_back, timeout) -> Ran
        inputs:    {file name: bytes} written into the command's working folder before it starts
        hand_back: the file names, in that folder, read back after every process it started ended
        timeout:   seconds of wall clock; past them every process of the run is killed

`tpucourse grade` passes each tree's sandbox (sandbox.TreeSandbox keeps this contract).
`Unisolated` is for a tree one trusts not to attack its grader (`pytest --isolated` on one's own
tree, bench/trusted_check_mutants.py, the project's tests): the command runs as this user, in
a private folder, in a session of its own whose processes are all killed before anything is read
back, but it can read and write whatever this user can. It keeps a tree's results from its own
process, not its files from the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

OUTPUT_BYTES = 64 * 1024  # of stdout and of stderr kept: the first and last halves
FILE_BYTES = 256 * 2**20  # a handed-back file larger than this is left out
POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Ran:
    """How one command for one tree ended, and what it handed back."""

    exit_status: int | None  # None: killed past its limit
    stdout: bytes = b""
    stderr: bytes = b""
    files: dict[str, bytes] = field(default_factory=dict)  # the hand_back files that exist, within size
    timed_out: bool = False


def clean_environment() -> dict[str, str]:
    """This process's environment, without what would reconfigure a child's pytest; every run a
    process of its own, never answered by a warm process (learner/served_runs.py), on the CPU."""
    from ..learner.served_runs import ENV as WARM_ENV
    from .record import TOKEN_FD_ENV

    # JAX_PLATFORMS=cpu: a class is graded under TPU interpret mode, on a TPU host's CPU too, where the
    # process that started this one (a `pytest --isolated` run, say) may hold the chip (docs/tpu.md).
    return {**{k: v for k, v in os.environ.items()
               if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST", TOKEN_FD_ENV)
               and not k.startswith("PYTEST_XDIST")}, WARM_ENV: "0", "JAX_PLATFORMS": "cpu"}


class Unisolated:
    """Runs commands for a tree as this user, each in a fresh private folder: no isolation."""

    def __init__(self, tree: Path | str, *, env: dict[str, str] | None = None, work: Path | None = None,
                 stop: threading.Event | None = None):
        self.tree = str(Path(tree).resolve())
        self._env = dict(os.environ if env is None else env)
        self._work = work
        self._stop = stop  # set: the run is killed at once (the grading was interrupted)

    def run(self, command: list[str], *, inputs: dict[str, bytes], hand_back: list[str], timeout: float) -> Ran:
        folder = Path(tempfile.mkdtemp(prefix="tpucourse-run-", dir=self._work))
        try:
            for name, data in inputs.items():
                (folder / _plain_name(name)).write_bytes(data)
            with open(folder / ".stdout", "wb") as out, open(folder / ".stderr", "wb") as err:
                process = subprocess.Popen(command, cwd=folder, env={**self._env, "TMPDIR": str(folder)},
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                           start_new_session=True)
                timed_out, deadline = False, time.monotonic() + timeout
                try:
                    while process.poll() is None:
                        if time.monotonic() > deadline or (self._stop is not None and self._stop.is_set()):
                            timed_out = True
                            break
                        time.sleep(POLL_SECONDS)
                finally:
                    _kill_group(process.pid)
                    process.wait()
            files = {}
            for name in hand_back:
                path = folder / _plain_name(name)
                if path.is_file() and not path.is_symlink() and path.stat().st_size <= FILE_BYTES:
                    files[name] = path.read_bytes()
            return Ran(None if timed_out else process.returncode, bounded(folder / ".stdout"),
                       bounded(folder / ".stderr"), files, timed_out)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def bounded(path: Path, limit: int = OUTPUT_BYTES) -> bytes:
    """A log's first and last limit/2 bytes, with a line saying how much was left out between."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            if size <= limit:
                return handle.read()
            head = handle.read(limit // 2)
            handle.seek(size - limit // 2)
            return head + f"\n[... {size - limit:,} bytes left out ...]\n".encode() + handle.read()
    except OSError:
        return b""


def _plain_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(f"{name!r}: inputs and handed-back files are plain names in the run's folder")
    return name


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
