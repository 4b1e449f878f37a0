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

While it waits, the test's thread watches the simulated devices
(jax_internals.join_watching): when every device is blocked on a semaphore that nothing
can signal any more, the call is a deadlock and is stopped at once, without waiting out
the deadline. Either way the error carries the waits each device was blocked in, for
the report.

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

from .. import jax_internals

DEFAULT_SECONDS = 60.0
GRACE_SECONDS = 5.0  # how long the aborted call gets to unwind


class DeadlineExceeded(Exception):
    """The call did not finish in time; `still_running` says whether its thread was stopped,
    `repeated` that the same call already passed its deadline earlier in the run."""

    def __init__(self, seconds: float, still_running: bool, repeated: bool = False,
                 set_by: str = "--kernel-timeout"):
        self.seconds = seconds
        self.still_running = still_running
        self.repeated = repeated
        self.set_by = set_by  # what set the deadline in force, for the report
        self.waits: list = []  # jax_internals.BlockedWait of each blocked device
        self.deadlock = False  # every device was blocked for good: stopped before the deadline
        super().__init__(f"did not finish within {seconds:g} s")


class _Stop(BaseException):
    """Raised inside a worker thread still running Python after the interpreter abort (a
    BaseException, so that no `except Exception` in graded code or in a check swallows it)."""


class Deadline:
    """The deadline of one run's graded calls: `seconds`, None or 0 for none."""

    def __init__(self, seconds: float | None = DEFAULT_SECONDS):
        if seconds is not None and seconds < 0:
            raise ValueError(f"a deadline must be positive (or 0 for none), got {seconds}")
        self.seconds = seconds or None
        self.set_by = "--kernel-timeout"  # what set the deadline in force, for the report
        # Calls (by key) that already passed their deadline: hypothesis replays a failing
        # example, and waiting out the same hang twice would only double the wait.
        self._hung: dict = {}

    @contextlib.contextmanager
    def at_most(self, seconds: float, set_by: str):
        """Within the block, calls get at most `seconds` (a test's own, shorter deadline)."""
        if seconds <= 0:
            raise ValueError(f"a deadline must be positive, got {seconds}")
        previous = (self.seconds, self.set_by)
        if self.seconds is None or seconds < self.seconds:
            self.seconds, self.set_by = seconds, set_by
        try:
            yield
        finally:
            self.seconds, self.set_by = previous

    def call(self, function, *args, key=None, **kwargs):
        """function(*args, **kwargs) within the deadline, or DeadlineExceeded.

        key: identifies the call (compiled.call_key(..., exact=True)); a call whose key
        already passed its deadline in this run fails at once instead of hanging again.
        """
        seconds = self.seconds
        if seconds is None:
            return function(*args, **kwargs)
        if key is not None and key in self._hung:
            earlier = self._hung[key]
            error = DeadlineExceeded(earlier.seconds, earlier.still_running, repeated=True,
                                     set_by=earlier.set_by)
            error.waits, error.deadlock = earlier.waits, earlier.deadlock
            raise error
        settings = jax_internals.thread_local_settings()
        outcome: dict = {}

        def work():
            try:
                with jax_internals.thread_local_settings_applied(settings):
                    outcome["value"] = function(*args, **kwargs)
            except BaseException as error:  # handed to the waiting thread
                outcome["error"] = error

        worker = threading.Thread(target=work, name="tpucourse-graded-call", daemon=True)
        worker.start()
        deadlock = jax_internals.join_watching(worker, seconds)
        if worker.is_alive():
            waits = deadlock if deadlock is not None else jax_internals.snapshot()
            jax_internals.abort_tpu_interpreter()
            worker.join(1.0)
            if worker.is_alive():
                _raise_in(worker, _Stop)
                worker.join(GRACE_SECONDS)
            still_running = worker.is_alive()
            jax_internals.forget_abandoned_calls()
            error = DeadlineExceeded(seconds, still_running, set_by=self.set_by)
            error.waits, error.deadlock = waits, deadlock is not None
            if key is not None:
                self._hung[key] = error
            raise error
        if "error" in outcome:
            error = outcome.pop("error")
            try:
                raise error
            finally:
                del error
        return outcome.get("value")


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise `exception` in `thread` the next time it runs Python bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))
