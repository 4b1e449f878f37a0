"""One Ctrl-C stops the run, even where JAX swallows it.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside
JAX that can be a garbage-collection callback (`_xla_gc_callback`): Python prints
"Exception ignored in ..." there and carries on, and a run went on to finish every test.
While a run is in progress the session's handler also writes the press down, and the run
looks at it where it has control: while it waits for a graded call (every quarter second)
and after each test. The press is read once: pytest's own handling of the interrupt (the
summary, the state file) then runs undisturbed.
"""

from __future__ import annotations

import signal
import threading


class CtrlC:
    """The SIGINT handler of one run; install() in the main thread, uninstall() at its end."""

    def __init__(self):
        self._pressed = False
        self._previous = None

    def install(self) -> None:
        """Take over SIGINT, where it has Python's default handler (not where it is ignored,
        as in a background job, or where someone else handles it)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handler)

    def uninstall(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        self._pressed = False

    def _handler(self, signum, frame):
        self._pressed = True
        raise KeyboardInterrupt

    def handled(self) -> None:
        """pytest has stopped the run for this press: nothing left to raise."""
        self._pressed = False

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed and its exception got lost."""
        if self._pressed:
            self._pressed = False
            raise KeyboardInterrupt


CTRL_C = CtrlC()  # signals are the process's: one handler per process
