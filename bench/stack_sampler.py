"""Where a pytest run's time goes, by sampling the main thread's stack: a pytest plugin.

    PYTHONPATH=bench STACK_SAMPLES=/tmp/stacks.txt pytest -p stack_sampler exercises --gates ...

Every 20 ms a thread reads the main thread's stack (`sys._current_frames`, nothing is patched or
traced, so the course's checks and pytest-benchmark's store see the run as it is) and counts each
function on it once: a function's count times the interval is the time the run spent inside it,
its callees included. JAX's own compile and trace times come from `jax.monitoring`'s duration
events. At the session's end the report goes to $STACK_SAMPLES (default stack-samples.txt): the
run's wall time, the events' totals, and the functions of the course, its solutions and JAX's
compile, trace and profiler paths that held the most time.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

INTERVAL = 0.02  # seconds between samples
SHOWN = 70  # functions in the report
KEPT = ("pytest_tpucourse", "solutions", "exercises", "jax/_src/profiler", "jax/_src/interpreters/pxla",
        "jax/_src/compiler", "jax/_src/pjit", "jax/_src/dispatch", "jax/_src/pallas", "jax/_src/api")


class _Sampler:
    def __init__(self):
        self.inclusive: collections.Counter = collections.Counter()
        self.samples = 0
        self.events: collections.Counter = collections.Counter()
        self.started = time.perf_counter()
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)

    def start(self) -> None:
        try:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(self._event)
        except Exception:  # no JAX, or no monitoring: stacks only
            pass
        self._thread.start()

    def _event(self, name: str, seconds: float, **_) -> None:
        self.events[name] += seconds

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            frame = sys._current_frames().get(self._main)
            seen = set()
            while frame is not None:
                code = frame.f_code
                key = f"{_short(code.co_filename)}:{code.co_name}"
                if key not in seen:
                    seen.add(key)
                    self.inclusive[key] += 1
                frame = frame.f_back
            self.samples += 1

    def report(self) -> str:
        self._stop.set()
        self._thread.join(timeout=1)
        wall = time.perf_counter() - self.started
        lines = [f"wall {wall:.1f} s, {self.samples} samples every {INTERVAL * 1e3:.0f} ms", "",
                 "jax.monitoring duration events (seconds, summed):"]
        lines += [f"  {seconds:9.2f}  {name}" for name, seconds in self.events.most_common(25)]
        lines += ["", "inclusive seconds by function:"]
        shown = [(k, n) for k, n in self.inclusive.most_common() if any(part in k for part in KEPT)][:SHOWN]
        lines += [f"  {n * INTERVAL:9.2f}  {k}" for k, n in shown]
        return "\n".join(lines) + "\n"


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/work/", "/main/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
    return filename


_sampler: _Sampler | None = None


def pytest_configure(config):
    global _sampler
    _sampler = _Sampler()
    _sampler.start()


def pytest_unconfigure(config):
    if _sampler is None:
        return
    text = _sampler.report()
    path = os.environ.get("STACK_SAMPLES", "stack-samples.txt")
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
