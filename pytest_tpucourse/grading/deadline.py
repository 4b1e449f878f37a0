"""A deadline on every call into code under grading (`--kernel-timeout SECONDS`).

A kernel can hang: a semaphore or DMA wait that nothing signals blocks TPU
interpret mode forever (it ignores Ctrl-C), and so does a `pl.loop` or
`lax.while_loop` that never ends. The call therefore runs in a worker thread
while the test's thread waits at most the deadline. When it expires:

  1. TPU interpret mode is told the computation failed (the flag its semaphore
     waits poll every 0.1 s), its barriers are aborted and its simulated memory
     dropped, so a deadlocked kernel, or a loop that touches a Ref, raises
     inside the worker within a fraction of a second;
  2. a Python-level loop gets an exception raised in the worker thread;
  3. the test fails with one DeadlineExceeded naming the function, and the
     interpreter state is reset so the next kernel runs.

One case survives all three: a loop compiled by XLA that touches no Ref
(`lax.while_loop` on scalars inside a kernel). Nothing can interrupt it inside
the process; the worker thread is left behind (a daemon thread: the run still
exits) and keeps one CPU core busy until the run ends. The message says so.

The calling thread's thread-local JAX settings (a `force_tpu_interpret_mode`,
`enable_x64` or mesh context around the call) are carried into the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

DEFAULT_SECONDS = 60.0
GRACE_SECONDS = 5.0  # how long the aborted call gets to unwind

_seconds: float | None = DEFAULT_SECONDS
# Calls (by key) that already passed their deadline: hypothesis replays a failing example,
# and waiting out the same hang twice would only double the wait.
_hung: dict = {}


class DeadlineExceeded(Exception):
    """The call did not finish in time; `still_running` says whether its thread was stopped,
    `repeated` that the same call already passed its deadline earlier in the run."""

    def __init__(self, seconds: float, still_running: bool, repeated: bool = False):
        self.seconds = seconds
        self.still_running = still_running
        self.repeated = repeated
        super().__init__(f"did not finish within {seconds:g} s")


class _Stop(BaseException):
    """Raised inside a worker thread still running Python after the interpreter abort (a
    BaseException, so that no `except Exception` in graded code or in a check swallows it)."""


def configure(seconds: float | None) -> None:
    """The deadline for every later call; None or 0 turns it off."""
    global _seconds
    if seconds is not None and seconds < 0:
        raise ValueError(f"a deadline must be positive (or 0 for none), got {seconds}")
    _seconds = seconds or None
    _hung.clear()


def current() -> float | None:
    return _seconds


def call(function, *args, key=None, **kwargs):
    """function(*args, **kwargs) within the deadline, or DeadlineExceeded.

    key: identifies the call (function and arguments); a call whose key already
    passed its deadline in this run fails at once instead of hanging again.
    """
    seconds = _seconds
    if seconds is None:
        return function(*args, **kwargs)
    if key is not None and key in _hung:
        earlier = _hung[key]
        raise DeadlineExceeded(earlier.seconds, earlier.still_running, repeated=True)
    settings = _thread_local_settings()
    outcome: dict = {}

    def work():
        try:
            with _apply(settings):
                outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # handed to the waiting thread
            outcome["error"] = error

    worker = threading.Thread(target=work, name="tpucourse-graded-call", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _abort_interpreter()
        worker.join(1.0)
        if worker.is_alive():
            _raise_in(worker, _Stop)
            worker.join(GRACE_SECONDS)
        still_running = worker.is_alive()
        _reset_interpreter()
        error = DeadlineExceeded(seconds, still_running)
        if key is not None:
            _hung[key] = error
        raise error
    if "error" in outcome:
        error = outcome.pop("error")
        try:
            raise error
        finally:
            del error
    return outcome.get("value")


_CONTEXT_CONFIGS = ("mesh_context_manager", "abstract_mesh_context_manager", "device_context",
                    "compute_on_context_manager", "xla_metadata_context_manager",
                    "pallas_tpu_interpret_mode_context_manager")


def _thread_local_settings() -> list:
    """Every JAX setting the calling thread has set locally (interpret mode, x64, mesh, ...)."""
    from jax._src import config as jax_config

    configs = list(jax_config.config_states.values())
    configs += [getattr(jax_config, name) for name in _CONTEXT_CONFIGS if hasattr(jax_config, name)]
    unset = jax_config.config_ext.unset
    return [(config, value) for config in configs if (value := config.get_local()) is not unset]


@contextlib.contextmanager
def _apply(settings: list):
    """Set the caller's thread-local JAX settings in this (worker) thread, as their context managers do."""
    previous = []
    try:
        for config, value in settings:
            previous.append((config, config.swap_local(value)))
            hook = getattr(config, "_update_thread_local_hook", None)
            if hook:
                hook(value)
        yield
    finally:
        for config, value in reversed(previous):
            config.set_local(value)


def _abort_interpreter() -> None:
    """Make a hung TPU-interpret-mode kernel raise (private JAX API, 0.10.x)."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
    except ImportError:
        return
    memory = getattr(interpreter, "_shared_memory", None)
    if memory is None:
        return
    with memory.lock:
        if getattr(memory, "_failure", None) is None:
            memory._failure = TimeoutError("the graded call passed its deadline")
    for barrier in (getattr(memory, "barrier", None), getattr(memory, "clean_up_barrier", None)):
        if barrier is not None:
            barrier.abort()
    interpreter.reset_tpu_interpret_mode_state()


def _reset_interpreter() -> None:
    from jax._src import dispatch
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()
    dispatch.runtime_tokens.clear()


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise `exception` in `thread` the next time it runs Python bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))
