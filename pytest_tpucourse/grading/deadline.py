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
the process; the worker thread is left behind (a daemon thread) and keeps one CPU
core busy. Such a thread would also keep the process from exiting (JAX's thread
pools are joined at exit), so `left_running` tells the session, which ends the
process itself once the run is over and its summary and state file are written.

A graded function that passed its deadline once is not run again in this run: each
later call fails at once with the same report (hypothesis replays a failing example,
and a chapter's tests call one function many times; each would wait out the deadline).

Compiling is not running: the graded call compiles its program before the deadline
starts (grading/calls.py), so a slow compile under load is never reported as a hang.

The calling thread's thread-local JAX settings (a `force_tpu_interpret_mode`,
`enable_x64` or mesh context around the call) are carried into the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

from ..core import jax_internals
from ..core.running_test import current_test
from .interrupts import CTRL_C

DEFAULT_SECONDS = 60.0
GRACE_SECONDS = 5.0  # how long the aborted call gets to unwind


class DeadlineExceeded(Exception):
    """The call did not finish in time; `still_running` says whether its thread was stopped,
    `repeated` that the same graded function already passed its deadline earlier in the run
    (in `first_test`), so it was not run again."""

    def __init__(self, seconds: float, still_running: bool, repeated: bool = False,
                 set_by: str = "--kernel-timeout", first_test: str | None = None):
        self.seconds = seconds
        self.still_running = still_running
        self.repeated = repeated
        self.set_by = set_by  # what set the deadline in force, for the report
        self.first_test = first_test  # the test whose call first passed the deadline
        self.waits: list = []  # jax_internals.BlockedWait of each blocked device
        self.deadlock = False  # every device was blocked for good: stopped before the deadline
        super().__init__(f"did not finish within {seconds:g} s")

    def again(self) -> DeadlineExceeded:
        """The same report for a later call of the same function, which is not run."""
        error = DeadlineExceeded(self.seconds, self.still_running, repeated=True, set_by=self.set_by,
                                 first_test=self.first_test)
        error.waits, error.deadlock = self.waits, self.deadlock
        return error


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
        # Graded functions (by key) that passed their deadline, with the report of that call.
        self._hung: dict = {}
        # Worker threads that could not be stopped (compiled loops), still running.
        self._left_behind: list[threading.Thread] = []
        self._stopping: set[int] = set()  # the worker threads being stopped, by ident

    @property
    def left_running(self) -> bool:
        """A graded call could not be stopped and is still running: the process cannot exit
        normally (its thread would be waited for), the session ends it."""
        return any(thread.is_alive() for thread in self._left_behind)

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

        key: the graded function the call runs (hashable); once a call with this key has
        passed its deadline, every later one fails at once with the same report.
        """
        if key is not None and key in self._hung:
            raise self._hung[key].again()
        seconds = self.seconds
        if seconds is None:
            return function(*args, **kwargs)
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
        try:
            deadlock = jax_internals.join_watching(worker, seconds, between=CTRL_C.check)
        except KeyboardInterrupt:
            self._stop(worker, grace=0.0)  # Ctrl-C: the run stops now, however the call ends
            raise
        if worker.is_alive():
            waits = deadlock if deadlock is not None else jax_internals.snapshot()
            still_running = self._stop(worker, GRACE_SECONDS)
            error = DeadlineExceeded(seconds, still_running, set_by=self.set_by,
                                     first_test=current_test())
            error.waits, error.deadlock = waits, deadlock is not None
            if key is not None and deadlock is None:
                self._hung[key] = error
            raise error
        if "error" in outcome:
            error = outcome.pop("error")
            try:
                raise error
            finally:
                del error
        return outcome.get("value")

    def unless_stopped(self, function):
        """`function` for a second attempt inside one call (the eager run after a compiled
        program failed): refused once the deadline is stopping the call, whose first attempt
        failed because it was stopped, so the hang does not start again inside the stop."""
        def attempt(*args, **kwargs):
            if threading.get_ident() in self._stopping:
                raise _Stop()
            return function(*args, **kwargs)

        return attempt

    def _stop(self, worker: threading.Thread, grace: float) -> bool:
        """Stop a graded call's thread; whether it is still running (it is then left behind)."""
        self._stopping.add(worker.ident)
        jax_internals.abort_tpu_interpreter()
        worker.join(1.0)
        if worker.is_alive() and grace > 0:
            _raise_in(worker, _Stop)
            worker.join(grace)
        still_running = worker.is_alive()
        if still_running:
            self._left_behind.append(worker)
        else:
            self._stopping.discard(worker.ident)
        jax_internals.forget_abandoned_calls()
        return still_running


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise `exception` in `thread` the next time it runs Python bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))
