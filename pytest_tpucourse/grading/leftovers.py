"""What graded code can leave in the process after its tests: threads that never end, forks.

* A non-daemon thread started by graded code (at import, say) that never ends keeps the
  interpreter from exiting after the run: the tests pass and pytest never returns. Once the
  summary and the state file are written, the session ends the process itself, with pytest's
  exit status, naming the module that started the thread (`threads_left_by_the_run`).
* A fork in graded code (`os.fork()` at import) gives a second pytest, a copy of this one,
  that carries on running the tests without JAX's threads and deadlocks, orphaned, after
  this run ends. In a child of a fork the course's hooks end the process at the first
  chance (`in_a_forked_child`), and a watchdog ends it after FORK_GRACE_SECONDS whatever it
  is doing; a child that only runs its own work and exits (multiprocessing) is left alone
  within that time.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

FORK_GRACE_SECONDS = 20.0
_WAIT_FOR_THREADS = 0.5  # seconds a finishing thread gets before the run is ended without it

_session_pid: int | None = None
_fork_hook_registered = False  # os.register_at_fork cannot be undone: once per process, whatever its runs


def watch_forks() -> None:
    """From now on, a child forked from this process is ended (see the module's docstring)."""
    global _session_pid, _fork_hook_registered
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_forked)
        _fork_hook_registered = True
    _session_pid = os.getpid()


def stop_watching_forks() -> None:
    """The run is over: a fork from now on is not graded code's (a warm process forking runs)."""
    global _session_pid
    _session_pid = None


def in_a_forked_child() -> bool:
    """This process is a fork of the run's process (the run's hooks call end_forked_child)."""
    return _session_pid is not None and os.getpid() != _session_pid


def end_forked_child() -> None:
    if in_a_forked_child():
        os._exit(0)


def _forked() -> None:
    if _session_pid is None:
        return
    watchdog = threading.Thread(target=_end_later, name="tpucourse-forked-child", daemon=True)
    watchdog.start()


def _end_later() -> None:
    import time

    time.sleep(FORK_GRACE_SECONDS)
    if in_a_forked_child():  # not if the child started a run of its own (pytest.main in a fork)
        os._exit(0)


def threads_at_start() -> set[int]:
    return {thread.ident for thread in threading.enumerate()}


def threads_left_by_the_run(before: set[int], course_root: Path) -> list[str]:
    """Each non-daemon thread started since `before` still running, as "<what started it>
    (thread <name>)", after giving finishing threads a moment."""
    import time

    left = []
    deadline = time.monotonic() + _WAIT_FOR_THREADS
    for thread in threading.enumerate():
        if (thread is threading.main_thread() or thread.daemon or thread.ident in before
                or thread is threading.current_thread()):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive() and not _idle_pool_worker(thread):
            left.append(f"{_started_by(thread, course_root)} (thread {thread.name!r})")
    return left


def _idle_pool_worker(thread: threading.Thread) -> bool:
    """A concurrent.futures worker: the interpreter stops it at exit by itself."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "_worker" and "concurrent" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _started_by(thread: threading.Thread, course_root: Path) -> str:
    """The course file the thread's code is in (its innermost frame there), else its target."""
    root = Path(course_root).resolve()
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        file = Path(frame.f_code.co_filename)
        try:
            shown = file.resolve().relative_to(root).as_posix()
        except (ValueError, OSError):
            shown = None
        if shown is not None and not shown.startswith((".venv", "pytest_tpucourse")):
            return f"{shown}:{frame.f_lineno} in {frame.f_code.co_name}()"
        frame = frame.f_back
    target = getattr(thread, "_target", None)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or repr(target)
    return f"{module}.{name}" if module else "code of the run"
