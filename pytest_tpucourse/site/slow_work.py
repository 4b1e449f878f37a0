"""Slow answers of the site's server, worked off the request path: a lane per kind of work.

A lane is one worker thread and a bounded list of questions. A request asks its question,
waits a moment for the answer, and when none has come gets "still working" (the page shows it
and asks again); the same question asked again finds the same job. At most `waiting` jobs are
queued or running in a lane; one more is refused with `Busy`, never queued without end. Answers
are kept for the next asker (at most `kept` of them), or, for work that reads files the learner
edits, handed out once and forgotten.

One worker per lane, because the work is not safe to run twice at once: JAX's lowering for a TPU
sets process-wide state (interpret mode off, the chip's rules), and the real compiler is one
child process. The worker is a daemon thread: Ctrl-C on the server ends a compile in progress.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


class Busy(Exception):
    """The lane holds as many unfinished jobs as it may; the message says so."""


@dataclass
class Job:
    work: Callable[[], dict]
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict | None = None
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self.work()
        except Exception as error:  # handed to whoever asks; the worker goes on
            self.error = error
        finally:
            self.done.set()


@dataclass(frozen=True)
class Working:
    """No answer yet: how long the job has run or waited, and how many jobs are before it."""

    seconds: float
    ahead: int


class Lane:
    def __init__(self, name: str, *, waiting: int = 8, kept: int = 256, keep_answers: bool = True):
        self.name, self.waiting, self.kept, self.keep_answers = name, waiting, kept, keep_answers
        self._jobs: OrderedDict[Hashable, Job] = OrderedDict()
        self._order: list[Job] = []  # unfinished jobs, oldest first
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        threading.Thread(target=self._work, name=f"site-{name}", daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            job.run()
            with self._lock:
                self._order.remove(job)

    def ask(self, key: Hashable, work: Callable[[], dict], wait: float) -> dict | Working:
        """The answer of `work` (its exception raised), or Working if it is not done within `wait` s."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                if len(self._order) >= self.waiting:
                    raise Busy(f"the server's {self.name} has {len(self._order)} questions to answer already, "
                               f"the most it takes at once; ask again when the page shows an answer")
                job = self._jobs[key] = Job(work)
                self._order.append(job)
                self._queue.put(job)
                self._forget_old()
            self._jobs.move_to_end(key)
        if not job.done.wait(wait):
            with self._lock:
                ahead = self._order.index(job) if job in self._order else 0
            return Working(time.monotonic() - job.started, ahead)
        if not self.keep_answers:
            with self._lock:
                if self._jobs.get(key) is job:
                    del self._jobs[key]
        if job.error is not None:
            raise job.error.with_traceback(None)  # raised afresh for each asker, its traceback not grown
        return job.answer

    def _forget_old(self) -> None:
        """Drop the oldest finished answers beyond `kept` (unfinished jobs are never dropped)."""
        finished = [key for key, job in self._jobs.items() if job.done.is_set()]
        for key in finished[:max(0, len(finished) - self.kept)]:
            del self._jobs[key]

    def unfinished(self) -> int:
        with self._lock:
            return len(self._order)
