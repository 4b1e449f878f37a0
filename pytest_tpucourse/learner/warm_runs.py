"""Pytest runs for `tpucourse watch`, answered in seconds: one warm process, a fork per run.

Starting `python -m pytest` costs Python's start and the import of pytest, its plugins,
hypothesis, JAX and this package (1.3-1.4 s on two cores, docs/speed.md) before the first test. The
watcher pays that once (`WarmRuns.preload`, which never starts JAX's backend, so no XLA
thread exists to be forked), then forks one child per run. Each child is a fresh pytest
process, as `python -m pytest` run from the course root would be: it imports the learner's
modules anew, starts its own JAX backend, and writes straight to the terminal. Compiled
programs outlive the child in the run's persistent compilation cache (`--jax-cache`).

A kernel that hangs hangs only the child: the plugin's `--kernel-timeout` fails it and the
run ends by itself; Ctrl-C stops the child, then the watch. Without fork (Windows), or with
TPUCOURSE_WATCH_RUNS=spawn, each run is a `python -m pytest` subprocess instead.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pkgutil
import signal
import subprocess
import sys
from pathlib import Path

MODE_ENV = "TPUCOURSE_WATCH_RUNS"

# The preloaded plugins were imported before pytest could rewrite their asserts, which pytest
# would report in every run; their asserts are not the graded tests'.
NOT_REWRITTEN = ("-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning")

# Modules that start JAX's backend when imported: never preloaded.
STARTS_JAX_AT_IMPORT = frozenset({"pytest_tpucourse.prompt"})

STOP_GRACE_SECONDS = 5.0  # after Ctrl-C, how long a child may take to write its summary


class WarmRuns:
    def __init__(self, course_root: Path, spawn: bool | None = None):
        self.course_root = Path(course_root)
        if spawn is None:
            spawn = os.environ.get(MODE_ENV) == "spawn" or not hasattr(os, "fork")
        self.spawn = spawn
        self.preloaded = False

    @property
    def mode(self) -> str:
        return "a python -m pytest process per run" if self.spawn else "each run forked from this warm process"

    def preload(self) -> None:
        """Import what every run imports, once; runs are spawned instead if that started JAX."""
        if self.spawn or self.preloaded:
            return
        self.preloaded = True
        if not preload():
            self.spawn = True

    def run(self, args: list[str]) -> int:
        """One pytest run with `args` from the course root; its exit code. Ctrl-C stops the
        run (given a moment to write its summary and the state file) and is raised again."""
        self.preload()
        if self.spawn:
            child = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=self.course_root)
            try:
                return child.wait()
            except KeyboardInterrupt:
                _stop(child.pid, lambda: child.poll() is not None, child.wait)
                raise
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._child(args)
        try:
            _, status = os.waitpid(pid, 0)
        except KeyboardInterrupt:
            _stop(pid, lambda: os.waitpid(pid, os.WNOHANG)[0] != 0, lambda: os.waitpid(pid, 0))
            raise
        return os.waitstatus_to_exitcode(status)

    def _child(self, args: list[str]) -> None:
        """The forked run: pytest as `python -m pytest` would start it in the course root."""
        os.chdir(self.course_root)
        sys.path[0] = str(self.course_root)
        sys.argv = ["pytest"]
        pytest_main_then_exit(args)


def preload() -> bool:
    """Import what every pytest run of the course imports: pytest and its plugins, hypothesis,
    NumPy, JAX and this package, without starting JAX's backends. Returns whether forking
    runs from this process is safe (no module started a backend after all)."""
    from importlib.metadata import entry_points

    import pytest  # noqa: F401

    for entry in entry_points(group="pytest11"):
        try:
            entry.load()
        except Exception:  # a broken plugin fails in the run itself, as it would unpreloaded
            pass
    for name in ("hypothesis.strategies", "hypothesis.extra.numpy", "numpy", "jax", "jax.numpy",
                 "jax.experimental.pallas", "jax.experimental.pallas.tpu", "jax.test_util"):
        importlib.import_module(name)
    import pytest_tpucourse
    from ..core import jax_internals

    for module in pkgutil.walk_packages(pytest_tpucourse.__path__, "pytest_tpucourse."):
        if module.name in STARTS_JAX_AT_IMPORT:
            continue
        try:
            importlib.import_module(module.name)
        except Exception:  # optional extras (plot, tpu-compile) may be missing
            pass
    return not jax_internals.backends_started()  # a fork would inherit XLA's locks without its threads


def pytest_main_then_exit(args: list[str], plugins=()) -> None:
    """In a forked child: pytest.main(args), then exit as a normal exit would. Never returns."""
    code = 3
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import pytest

        code = int(pytest.main([*NOT_REWRITTEN, *args], plugins=list(plugins)))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)


def exit_now(code: int) -> None:
    """End this process as a normal exit ends it, its exit functions run (a TPU compiler child is
    closed) and its output flushed, but without the interpreter's teardown of every module it
    imported: a forked run's child, and a served run's client (served_runs.py). Never returns."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more reaches it
                pass
        os._exit(code)


def _stop(pid: int, ended, reap) -> None:
    """The terminal's Ctrl-C reached the child too; kill it if it has not ended in a moment."""
    import time

    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline:
        try:
            if ended():
                return
        except ChildProcessError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        reap()
    except (ProcessLookupError, ChildProcessError):
        pass
