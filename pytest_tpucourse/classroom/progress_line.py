"""The line a long grading job shows while it runs: trees done of all, which are running,
time so far and an estimate of the rest.

On a terminal it is one line rewritten in place; elsewhere (a CI log) one line per
finished tree. Quiet (-q) shows nothing. Tree names are shown escaped (escaping.py).
"""

from __future__ import annotations

import sys
import threading
import time

from .escaping import tree_name


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ProgressLine:
    def __init__(self, total: int, stream=None, quiet: bool = False, clock=time.monotonic):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.clock = clock
        self.start = clock()
        self.done = 0
        self.running: list[str] = []
        self.interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._width = 0

    def text(self) -> str:
        elapsed = self.clock() - self.start
        line = f"grade: {self.done}/{self.total} trees done"
        if self.running:
            more = f" +{len(self.running) - 3}" if len(self.running) > 3 else ""
            shown = ", ".join(map(tree_name, self.running[:3])) + more
            line += f", grading {shown}"
        line += f"; {duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            line += f", about {duration(elapsed / self.done * (self.total - self.done))} left"
        return line

    def started(self, tree: str) -> None:
        with self._lock:
            self.running.append(tree)
            self._show()

    def finished(self, tree: str, outcome: str) -> None:
        with self._lock:
            if tree in self.running:
                self.running.remove(tree)
            self.done += 1
            if not self.quiet and not self.interactive:
                self.stream.write(f"{self.text()} ({tree_name(tree)}: {outcome})\n")
                self.stream.flush()
            self._show()

    def refresh(self) -> None:
        with self._lock:
            self._show()

    def close(self) -> None:
        with self._lock:
            if not self.quiet and self.interactive and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
                self._width = 0

    def _show(self) -> None:
        if self.quiet or not self.interactive:
            return
        line = self.text()
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = max(self._width, len(line))
