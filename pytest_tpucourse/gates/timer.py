"""Timing on the chip: device time, interleaved rounds, a confidence interval; pytest-benchmark keeps it.

What each choice protects against (docs/gates.md says it at length):
  - Compilation and first calls happen before anything is timed: a cold compile is not the op.
  - Warm-up by time (WARMUP_SECONDS per implementation), not by a count: clocks, caches and
    the allocator settle however long one call takes.
  - Device time, read off the device: on an accelerator each sample runs under JAX's profiler and
    is the sum of the device's own durations of the XLA programs its calls ran ("XLA Modules" of
    the device's trace), per call (`ProfilerDeviceClock`, method "device-profiler"). A Python-side
    loop of calls cannot show a kernel shorter than a call's dispatch: on a v5e host a jitted call
    and its sync cost 741.6-3099.0 us, and XLA's 8x4096x4096 bf16 matmul, 46.1-50.7 us on the
    device, timed at 119.7 us per call even with 200 calls per sync (docs/gates.md, "Device
    time"). A loop on the device is no cure for every op either: inside one XLA program the
    compiler may keep a memory-bound op's operands in the 128 MiB of VMEM between iterations (a
    4096² bf16 add timed at 53.9 us in a `lax.fori_loop`, under half its HBM floor; the skinny
    matmul's weight stayed in HBM). Where no device trace is to be had
    (no accelerator, or a profiler that records none), the method is "wall-calls": N calls per
    sync, one sync at the end, the cost of one empty sample (an empty jitted call and its sync)
    measured first and taken off every sample.
  - Traced in blocks of rounds, not one trace per sample: starting and stopping JAX's profiler and
    reading its trace cost about a second on a v5e host, against a few milliseconds of timed calls
    (a gate 03 slot took 65-130 s, 70 traces of one sample each). Each implementation's calls
    are traced once alone first, which gives the sequence of XLA programs one call runs; a block
    of rounds is then one trace, whose device events are cut into the samples in the order they
    ran, each sample exactly N repetitions of its implementation's sequence
    (`split_samples`). A trace that is not exactly that (another program ran, events dropped,
    more than one device) is not guessed at: the harness goes back to one trace per sample.
  - N calls per sample, N chosen so one sample holds about SAMPLE_SECONDS of the op's own time:
    with a device trace, from the device time of one call read off the trace that gives the
    call's programs (the host's sync, 0.5-3 ms on a v5e host and noisy by several times, would
    clamp N at its ceiling: 1000 calls of a 738 us matmul, 0.74 s a sample); without one, from the
    fastest warm-up call on the host's clock, an empty call's time taken off. The timing says
    which (`sized_by`). Each timing keeps the wall time per call beside the device time: where
    the host could not issue calls as fast as the device ran them (wall above DISPATCH_BOUND x
    device), the kernel is dispatch-bound and its timing says so; its device time is still the op's.
  - Per-op device time: the ops the device ran inside each program (the trace's "XLA Ops" line:
    the kernel's custom call, fusions, copies, prefetches) are summed per sample like the
    programs, and a timing keeps each op's median per call (`ops`), read off the same samples.
  - The input sets rotate within a sample and from sample to sample, so no cache is flattered
    by the same operands twice in a row.
  - Floor, kernel and ceiling are interleaved round by round, the order rotating each round:
    a thermal drift or a noisy neighbour hits all three alike, and their ratio is taken per round.
  - Garbage collection is off while timing: a collection in one sample is not the kernel's.
  - On a GPU, the L2 cache is flushed (a 256 MiB buffer written) before every sample, so no
    implementation starts with its inputs warm in cache from the previous one.
  - Rounds continue until every implementation's median is known to within TARGET_HALF_WIDTH
    (the 95% interval's half width over the median), or the time budget ends; the rows keep
    every sample and how the timing stopped.
The clock, the sync and the flush are arguments, so the harness runs on a CPU in the
tests with a fake clock; no test asserts on real time.
"""

from __future__ import annotations

import bisect
import gc
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from ..core.outcomes import RAISED_BY_GRADED_CODE
from . import stats

WARMUP_SECONDS = 0.25
SAMPLE_SECONDS = 0.01
MAX_ROUNDS = 200
BUDGET_SECONDS = 30.0
TARGET_HALF_WIDTH = 0.01
MAX_CALLS_PER_SAMPLE = 1000
L2_FLUSH_BYTES = 256 * 2**20
DISPATCH_BOUND = 1.5  # a per-call time under 1.5x an empty call's is dispatch, not the op
ROUNDS_PER_TRACE = 5  # device-profiler rounds after the first MIN_ROUNDS, traced together (all first ones are)


class TimingError(RuntimeError):
    """The harness could not produce a time that means anything."""


class ImplementationFailed(TimingError):
    """One of the implementations raised while it was being timed."""

    def __init__(self, name: str, error: Exception):
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        super().__init__(f"{name} raised {type(error).__name__}: {text}")
        self.name = name


DEVICE_PROFILER = "device-profiler"  # samples: the device's own durations, from the profiler's trace
WALL_CALLS = "wall-calls"  # samples: N calls per sync on the host's clock, an empty sample taken off
METHODS = (DEVICE_PROFILER, WALL_CALLS)
SIZED_BY_DEVICE = "device-time"  # N from one call's device time, read off the trace
SIZED_BY_HOST = "host-time"  # N from the fastest warm-up call on the host's clock, an empty call's time off


class OpTime(NamedTuple):
    """One op the device ran inside a program: its name, its category where the trace gives one
    ("" otherwise), and its device seconds (per call, in a Timing's breakdown)."""

    name: str
    category: str
    seconds: float


class DeviceEvent(NamedTuple):
    """One XLA program the device ran: its name, device seconds, and the ops the device ran
    inside it (OpTime, from the same device plane's op line; empty where the trace has none)."""

    program: str
    seconds: float
    ops: tuple = ()


@dataclass(frozen=True)
class Timing:
    """How one implementation timed: seconds per call, one sample per round."""

    samples: tuple[float, ...]
    calls_per_sample: int
    overhead: float  # seconds of one empty sample (taken off every sample of the wall-calls method)
    dispatch: float  # seconds per call of an empty jitted call, N per sync
    stopped: str  # "interval" (tight enough), "budget" or "max-rounds"
    method: str = WALL_CALLS
    wall_per_call: tuple[float, ...] = ()  # host wall seconds per call, one per sample (device-profiler)
    traces: int = 0  # profiler traces the measurement took (device-profiler: blocks of rounds, or one per sample)
    sized_by: str = SIZED_BY_HOST  # what set calls_per_sample: one call's device time, or the host's clock
    ops: tuple[OpTime, ...] = ()  # per-op device seconds per call: each op's median over the samples
    programs: tuple[str, ...] = ()  # the XLA programs one call runs, in order, where the trace listed them
    sample_ops: tuple[dict, ...] = ()  # per sample, {op: (category, device seconds per call)}: one per sample, or none

    @property
    def summary(self) -> stats.Summary:
        return stats.summarize(self.samples)

    @property
    def dispatch_bound(self) -> bool:
        """The host issued calls slower than the device ran them: a loop of calls would time dispatch."""
        if self.method == DEVICE_PROFILER and self.wall_per_call:
            return stats.median(self.wall_per_call) > DISPATCH_BOUND * self.summary.median
        return self.summary.median <= DISPATCH_BOUND * self.dispatch

    def describe(self) -> str:
        s = self.summary
        if self.method == DEVICE_PROFILER:
            text = (f"device time from the profiler's trace (XLA programs' durations on the device); {s.rounds} "
                    f"rounds of {self.calls_per_sample} calls ({_sized_words(self.sized_by)}), interleaved; "
                    f"stopped: {self.stopped}")
            if self.traces:
                text += (f"; {self.traces} traces for the measurement's samples "
                         + ("(rounds traced together)" if self.traces < s.rounds else "(one per sample)"))
            if self.dispatch_bound:
                wall = stats.median(self.wall_per_call)
                text += (f"; dispatch-bound: the host issued a call every {wall * 1e6:.1f} us while the device "
                         f"worked {s.median * 1e6:.1f} us of it (a Python loop of calls would report the first)")
            return text
        text = (f"wall clock, {s.rounds} rounds of {self.calls_per_sample} calls per sync, interleaved; stopped: "
                f"{self.stopped}; empty-sample overhead {self.overhead * 1e6:.1f} us taken off")
        if self.dispatch_bound:
            text += (f"; dispatch-bound: {s.median * 1e6:.2f} us per call is within {DISPATCH_BOUND}x "
                     f"an empty call's {self.dispatch * 1e6:.2f} us, so the op's own time is at most this")
        return text


class Harness:
    """Times several implementations of one op together (see the module docstring)."""

    def __init__(self, *, clock=time.perf_counter, sync=None, flush=None, empty=None, warmup=None,
                 sample=None, min_rounds=None, max_rounds=None, budget=None, target=None, device_clock=None):
        self.clock = clock
        self.device_clock = device_clock  # ProfilerDeviceClock on an accelerator; None: wall-calls
        self.sync = sync or _block_until_ready
        self.flush = flush
        self._empty = empty
        self.warmup = WARMUP_SECONDS if warmup is None else warmup
        self.sample_seconds = SAMPLE_SECONDS if sample is None else sample
        self.min_rounds = stats.MIN_ROUNDS if min_rounds is None else min_rounds
        self.max_rounds = MAX_ROUNDS if max_rounds is None else max_rounds
        self.budget = BUDGET_SECONDS if budget is None else budget
        self.target = TARGET_HALF_WIDTH if target is None else target
        self._device_clock_seen = False  # the device clock has recorded device time here (then kept)
        self._separator: tuple[str, ...] = ()  # the programs an empty call runs, as the device trace names them

    def measure(self, fns: dict, input_sets: list[tuple]) -> dict[str, Timing]:
        """{name: Timing} for every implementation, timed in the same interleaved rounds, at JAX's default
        matmul precision (a run on a TPU judges values at "highest": grading/backend.py)."""
        import jax

        with jax.default_matmul_precision(None):
            return self._measure(fns, input_sets)

    def _measure(self, fns: dict, input_sets: list[tuple]) -> dict[str, Timing]:
        if not input_sets:
            raise TimingError("nothing to time: no input sets")
        fns = {name: _named(name, fn) for name, fn in fns.items()}
        for name, fn in fns.items():  # compile, and call every input set once, before any timing
            for args in input_sets:
                _attributed(name, lambda: self.sync(fn(*args)))
        overhead, dispatch = self._baseline()
        calls = {name: _attributed(name, lambda: self._warm_up(fn, input_sets, overhead))
                 for name, fn in fns.items()}
        sized_by = SIZED_BY_HOST
        samples: dict[str, list[float]] = {name: [] for name in fns}
        walls: dict[str, list[float]] = {name: [] for name in fns}
        ops: dict[str, list[dict]] = {name: [] for name in fns}  # per sample: op -> (category, seconds per call)
        method = DEVICE_PROFILER if self._device_trace_records() else WALL_CALLS
        patterns = None
        if method == DEVICE_PROFILER:
            # one trace per block of rounds where each call's programs are known and the trace can be cut
            patterns, one_call = (self._call_patterns(fns, input_sets)
                                  if self.flush is None and hasattr(self.device_clock, "events")
                                  else (None, self._one_call_device_times(fns, input_sets)))
            if all(one_call.get(name) for name in fns):
                calls = {name: self._calls_for(one_call[name]) for name in fns}
                sized_by = SIZED_BY_DEVICE
        programs = dict(patterns or {})  # kept for the timings, whatever becomes of the block traces
        names, stopped = list(fns), "max-rounds"
        traces = 0  # device-profiler traces of the rounds, shared by every implementation they hold

        def order(round_: int) -> list[str]:
            shift = round_ % len(names)
            return names[shift:] + names[:shift]

        def keep(name: str, per_call: float, wall: float | None, sample_ops: dict | None = None) -> None:
            if not per_call > 0:
                raise TimingError(f"{name}: {calls[name]} calls timed at {per_call:.3g} s each once the "
                                  f"empty sample's {overhead:.3g} s is taken off: nothing measurable")
            samples[name].append(per_call)
            if wall is not None:
                walls[name].append(wall / calls[name])
            if sample_ops:
                ops[name].append(sample_ops)

        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            start = self.clock()
            round_ = 0
            while round_ < self.max_rounds:
                if round_ < self.min_rounds:  # the rounds before any stopping check: one block
                    block = self.min_rounds - round_
                else:  # then a check after every block: five rounds traced together, or one sample each
                    block = ROUNDS_PER_TRACE if patterns else 1
                block = min(block, self.max_rounds - round_)
                traced = None if patterns is None else self._traced_rounds(
                    fns, input_sets, calls, [(r, name) for r in range(round_, round_ + block) for name in order(r)],
                    patterns)
                traces += patterns is not None
                if traced is not None:
                    for name, per_call, wall, sample_ops in traced:
                        keep(name, per_call, wall, sample_ops)
                else:
                    patterns = None  # a trace that could not be cut: one trace per sample from here on
                    for r in range(round_, round_ + block):
                        for name in order(r):
                            keep(name, *self._sample(fns[name], name, input_sets, r, calls[name], method, overhead))
                            traces += method == DEVICE_PROFILER
                round_ += block
                if round_ < self.min_rounds:
                    continue
                if all(stats.summarize(s).relative_half_width <= self.target for s in samples.values()):
                    stopped = "interval"
                    break
                if self.clock() - start >= self.budget:
                    stopped = "budget"
                    break
        finally:
            if collecting:
                gc.enable()
        return {name: Timing(tuple(samples[name]), calls[name], overhead, dispatch, stopped, method,
                             tuple(walls[name]), traces if method == DEVICE_PROFILER else 0, sized_by,
                             op_breakdown(ops[name]), programs.get(name, ()),
                             tuple(ops[name]) if len(ops[name]) == len(samples[name]) else ()) for name in fns}

    def _sample(self, fn, name: str, input_sets, round_: int, n: int, method: str,
                overhead: float) -> tuple[float, float | None]:
        """One sample of its own: (seconds per call, host wall seconds of the n calls or None)."""
        if self.flush is not None:
            self.flush()
        if method == DEVICE_PROFILER:
            wall, device = _attributed(name, lambda: self._device_time_of_calls(fn, input_sets, round_, n))
            if device is None:
                raise TimingError(f"{name}: the profiler's trace holds no device time for its {n} calls")
            return device / n, wall
        total = _attributed(name, lambda: self._time_calls(fn, input_sets, round_, n))
        return (total - overhead) / n, None

    def _call_patterns(self, fns: dict, input_sets) -> tuple[dict[str, tuple[str, ...]] | None, dict]:
        """The XLA programs one call of each implementation runs on the device, in order, or None where
        a trace cannot say (no event, or more than one device); and the device seconds of that call
        per implementation, where the trace gave them. One trace holds a call of each, an empty call
        before, between and after them (`_separated_patterns`); where that trace cannot be cut, one
        trace each."""
        found = self._separated_patterns(fns, input_sets)
        if found is not None:
            return found
        patterns, seconds = {}, {}
        for name, fn in fns.items():
            events = _attributed(name, lambda: self.device_clock.events(
                lambda: self._time_calls(fn, input_sets, 0, 1)))
            if not events:
                return None, {**seconds, **self._one_call_device_times(
                    {n: f for n, f in fns.items() if n not in seconds}, input_sets)}
            patterns[name] = tuple(event[0] for event in events)
            seconds[name] = sum(event[1] for event in events)
        return patterns, seconds

    def _separated_patterns(self, fns: dict, input_sets) -> tuple[dict, dict] | None:
        """_call_patterns from one trace: a call of each implementation between empty calls, cut at the
        empty call's programs (`_separator`, read when the device check traced it). None unless the
        trace holds exactly one separator before, between and after the calls and a program in every gap."""
        empty, args = self._empty_call()
        separator = self._separator

        def work():
            self.sync(empty(*args))
            for name, fn in fns.items():
                _attributed(name, lambda: self._time_calls(fn, input_sets, 0, 1))
                self.sync(empty(*args))

        if not separator:
            return None
        events = self.device_clock.events(work)
        if not events:
            return None
        gaps, size = [], len(separator)
        starts = [i for i in range(len(events) - size + 1)
                  if tuple(event[0] for event in events[i:i + size]) == separator]
        if len(starts) != len(fns) + 1 or starts[0] != 0 or starts[-1] != len(events) - size:
            return None
        for first, second in zip(starts, starts[1:]):
            gap = events[first + size:second]
            if not gap:
                return None
            gaps.append(gap)
        patterns = {name: tuple(event[0] for event in gap) for name, gap in zip(fns, gaps)}
        return patterns, {name: sum(event[1] for event in gap) for name, gap in zip(fns, gaps)}

    def _one_call_device_times(self, fns: dict, input_sets) -> dict[str, float | None]:
        """Device seconds of one call of each implementation (one trace each), None where the trace has none."""
        return {name: _attributed(name, lambda: self.device_clock.time(lambda: self._time_calls(fn, input_sets, 0, 1)))
                for name, fn in fns.items()}

    def _calls_for(self, per_call: float) -> int:
        """N: the calls that hold about sample_seconds of per_call seconds each, 1 to MAX_CALLS_PER_SAMPLE."""
        per_call = max(per_call, self.sample_seconds / MAX_CALLS_PER_SAMPLE)
        return max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(self.sample_seconds / per_call)))

    def _traced_rounds(self, fns: dict, input_sets, calls: dict, plan: list[tuple[int, str]],
                       patterns: dict) -> list[tuple[str, float, float, dict]] | None:
        """The samples of `plan` ((round, implementation) in the order they run) from one trace:
        (name, device seconds per call, host wall seconds, {op: (category, seconds per call)}); None
        where the trace cannot be cut into them."""
        walls = []

        def work():
            for round_, name in plan:
                walls.append(_attributed(name, lambda: self._time_calls(fns[name], input_sets, round_, calls[name])))

        events = self.device_clock.events(work)
        runs = [(patterns[name], calls[name]) for _, name in plan]
        chunks = None if events is None else _cut(events, runs)
        if chunks is None:
            return None
        return [(name, sum(event[1] for event in chunk) / n, wall, ops_per_call(chunk, n))
                for (_, name), (_, n), chunk, wall in zip(plan, runs, chunks, walls)]

    def _time_calls(self, fn, input_sets, first: int, n: int) -> float:
        """Seconds for n calls (input sets rotating) and one sync at the end."""
        start = self.clock()
        out = None
        for i in range(n):
            out = fn(*input_sets[(first + i) % len(input_sets)])
        self.sync(out)
        return self.clock() - start

    def _device_trace_records(self) -> bool:
        """Whether the device clock sees device time here (an empty call traced once, the first time a
        harness asks: one trace less per measurement): a stand-in accelerator, or a profiler that
        records no device events, times by the wall clock."""
        if self.device_clock is None:
            return False
        if not self._device_clock_seen:
            empty, args = self._empty_call()
            events = (self.device_clock.events(lambda: self.sync(empty(*args)))
                      if hasattr(self.device_clock, "events") else None)
            self._separator = tuple(event[0] for event in events or ())
            # no program list (several devices' planes, say): whether the trace holds device time at all
            self._device_clock_seen = bool(events) or (
                self.device_clock.time(lambda: self.sync(empty(*args))) is not None)
        return self._device_clock_seen

    def _empty_call(self):
        """(an empty jitted call, its args): the one the harness was given, else its own, made once."""
        if self._empty is None:
            self._empty = _empty_call()
        return self._empty

    def _device_time_of_calls(self, fn, input_sets, first: int, n: int) -> tuple[float, float | None]:
        """(host wall seconds, device seconds) of n calls and one sync, traced by the device clock."""
        wall = []

        def calls():
            wall.append(self._time_calls(fn, input_sets, first, n))

        device = self.device_clock.time(calls)
        return wall[0], device

    def _baseline(self) -> tuple[float, float]:
        """(one empty sample's seconds, an empty call's seconds when N share one sync)."""
        empty, args = self._empty_call()
        self.sync(empty(*args))
        overhead = stats.median(self._time_calls(empty, [args], 0, 1) for _ in range(5))
        n = 100
        dispatch = stats.median(max(self._time_calls(empty, [args], 0, n) - overhead, 0.0) / n for _ in range(5))
        return overhead, dispatch

    def _warm_up(self, fn, input_sets, overhead: float) -> int:
        """Call fn until WARMUP seconds pass; return N by the host's clock (a device trace, where there
        is one, sets N afresh from one call's device time)."""
        start, fastest, calls = self.clock(), math.inf, 0
        while calls < 3 or self.clock() - start < self.warmup:
            fastest = min(fastest, self._time_calls(fn, input_sets, calls, 1) - overhead)
            calls += 1
        return self._calls_for(fastest)


def _named(name: str, fn):
    """fn, whose exceptions say which implementation raised (timing fails, naming it)."""
    def call(*args):
        try:
            return fn(*args)
        except RAISED_BY_GRADED_CODE as error:  # a kernel that skips fails its timing, it is not skipped
            raise ImplementationFailed(name, error) from error
    return call


def _attributed(name: str, work):
    """work(), an error in it (a failed sync, say) charged to implementation `name`."""
    try:
        return work()
    except ImplementationFailed:
        raise
    except RAISED_BY_GRADED_CODE as error:
        raise ImplementationFailed(name, error) from error


def _block_until_ready(out) -> None:
    import jax

    jax.block_until_ready(out)


def _tpucourse_separator(x):
    """The harness's empty call: its program's name (jit__tpucourse_separator) marks the gaps of a trace."""
    return x + 1


def _empty_call():
    import jax
    import jax.numpy as jnp

    return jax.jit(_tpucourse_separator), (jnp.zeros((), jnp.float32),)


def l2_flusher():
    """A function that writes a buffer larger than any GPU's L2, so the next sample starts cold."""
    import jax
    import jax.numpy as jnp

    buffer = jnp.zeros(L2_FLUSH_BYTES // 4, jnp.int32)
    touch = jax.jit(lambda b: b + 1)

    def flush() -> None:
        jax.block_until_ready(touch(buffer))

    return flush


class ProfilerDeviceClock:
    """Device seconds of the XLA programs some work ran, read from JAX's profiler (public API:
    `jax.profiler.start_trace`, `ProfileData`): the "XLA Modules" events of the device planes, whose
    durations the device itself recorded. None where the trace holds no such event."""

    LINE = "XLA Modules"
    OPS_LINE = "XLA Ops"  # the ops each program ran, on the same device plane

    def time(self, work) -> float | None:
        profile = self._trace(work)
        return None if profile is None else device_seconds(profile, self.LINE)

    def events(self, work) -> list[DeviceEvent] | None:
        """The device's XLA program events of the work, in the order they ran, each with its ops."""
        profile = self._trace(work)
        return None if profile is None else device_events(profile, self.LINE, self.OPS_LINE)

    @staticmethod
    def _trace(work):
        import tempfile

        import jax

        with tempfile.TemporaryDirectory(prefix="tpucourse-trace-") as folder:
            jax.profiler.start_trace(folder, profiler_options=_trace_options())
            try:
                work()
            finally:
                jax.profiler.stop_trace()
            traces = sorted(Path(folder).rglob("*.xplane.pb"))
            if not traces:
                return None
            return jax.profiler.ProfileData.from_file(str(traces[-1]))


def _trace_options():
    """The profiler's options for a device-time trace: no Python tracer. It would record every Python
    call of the timed loop (JAX's default records them), which costs the trace time and reads
    nothing the device planes need; the host's and the device's tracers stay as JAX sets them."""
    import jax

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    return options


def _device_plane_events(profile, line_name: str, *also: str) -> list[list]:
    """The events on the `line_name` line of each device plane that has any, one list per plane
    (followed, for each name in `also`, by that plane's events on the line of that name)."""
    planes = []
    for plane in profile.planes:
        if plane.name.startswith("/device:"):
            lines = [[event for line in plane.lines if line.name == name for event in line.events]
                     for name in (line_name, *also)]
            if lines[0]:
                planes.append(lines[0] if not also else lines)
    return planes


def device_seconds(profile, line_name: str = ProfilerDeviceClock.LINE) -> float | None:
    """The summed durations of the events on the `line_name` line of every device plane."""
    planes = _device_plane_events(profile, line_name)
    return sum(event.duration_ns * 1e-9 for events in planes for event in events) if planes else None


def device_events(profile, line_name: str = ProfilerDeviceClock.LINE,
                  ops_line: str = ProfilerDeviceClock.OPS_LINE) -> list[DeviceEvent] | None:
    """The events on the `line_name` line of the one device plane that has any, in the order they
    started, each with the ops of the `ops_line` line that started inside it; None when no device
    plane or more than one has such events."""
    planes = _device_plane_events(profile, line_name, ops_line)
    if len(planes) != 1:
        return None
    [(programs, ops)] = planes
    ops = sorted(ops, key=lambda e: e.start_ns)
    starts = [op.start_ns for op in ops]
    found = []
    for event in sorted(programs, key=lambda e: e.start_ns):
        inside = ops[bisect.bisect_left(starts, event.start_ns):bisect.bisect_right(
            starts, event.start_ns + event.duration_ns)]
        found.append(DeviceEvent(event.name, event.duration_ns * 1e-9,
                                 tuple(OpTime(op.name, _category(op), op.duration_ns * 1e-9) for op in inside)))
    return found


def _category(event) -> str:
    """The op's category where the trace says it (the "hlo_category" stat), else ""."""
    try:
        for key, value in event.stats:
            if key == "hlo_category":
                return str(value)
    except (TypeError, ValueError, AttributeError):
        pass
    return ""


def _sized_words(sized_by: str) -> str:
    return ("N from one call's device time" if sized_by == SIZED_BY_DEVICE
            else "N from the host's clock")


def split_samples(events: list, runs: list[tuple[tuple[str, ...], int]]) -> list[float] | None:
    """Device seconds per call of each run, from one trace's events in order: run i is `calls`
    repetitions of its `pattern` (the programs one call runs). None unless the events are exactly
    the runs' patterns, one after another, with nothing left over: a trace is never guessed at.
    An event is (program, seconds) or a DeviceEvent."""
    chunks = _cut(events, runs)
    return None if chunks is None else [sum(event[1] for event in chunk) / calls
                                        for chunk, (_, calls) in zip(chunks, runs)]


def _cut(events: list, runs: list[tuple[tuple[str, ...], int]]) -> list[list] | None:
    """The events of each run (split_samples), or None unless they are exactly the runs' patterns."""
    chunks, at = [], 0
    for pattern, calls in runs:
        size = len(pattern) * calls
        chunk = events[at:at + size]
        if not pattern or len(chunk) != size or any(event[0] != pattern[i % len(pattern)]
                                                    for i, event in enumerate(chunk)):
            return None
        chunks.append(chunk)
        at += size
    return chunks if at == len(events) else None


def ops_per_call(events: list, calls: int) -> dict[str, tuple[str, float]]:
    """{op: (category, device seconds per call)} of the ops inside these program events."""
    found: dict[str, tuple[str, float]] = {}
    for event in events:
        for op in (event[2] if len(event) > 2 else ()):
            category, seconds = found.get(op.name, (op.category, 0.0))
            found[op.name] = (category or op.category, seconds + op.seconds / calls)
    return found


def op_breakdown(samples: list[dict]) -> tuple[OpTime, ...]:
    """Each op's median device seconds per call over the samples that have a breakdown (an op
    missing from a sample counts 0 there), the longest first."""
    if not samples:
        return ()
    names = dict.fromkeys(name for sample in samples for name in sample)
    ops = [OpTime(name, next(s[name][0] for s in samples if name in s),
                  stats.median([s[name][1] if name in s else 0.0 for s in samples])) for name in names]
    return tuple(sorted(ops, key=lambda op: -op.seconds))


def harness_for(platform: str) -> Harness:
    """The harness a run on this platform times with: device time from the profiler on an accelerator,
    an L2 flush between samples on a GPU."""
    return Harness(flush=l2_flusher() if platform == "gpu" else None,
                   device_clock=ProfilerDeviceClock() if platform in ("tpu", "gpu") else None)


# ---------------------------------------------------------------- pytest-benchmark keeps the samples


class BenchmarkStore:
    """Hands each timing to pytest-benchmark, one fixture per implementation, so its terminal
    table, --benchmark-json and --benchmark-save carry the gate's samples as they were timed."""

    def __init__(self, request):
        self.request = request

    def require(self) -> None:
        """Before anything is timed: pytest-benchmark must be on, since it stores the timings."""
        session = self.request.config._benchmarksession
        if session.skip:
            pytest.skip("Benchmarks are skipped (--benchmark-skip was used).")
        if session.disabled:
            pytest.fail("gate timings are stored through pytest-benchmark, which is disabled "
                        "(--benchmark-disable, or pytest-xdist's -n): run the gates in one process "
                        "with benchmarks on", pytrace=False)

    def store(self, label: str | None, timing: Timing) -> None:
        """Record `timing` as test[label] (the kernel as the test itself) in pytest-benchmark."""
        from pytest_benchmark.fixture import BenchmarkFixture
        from pytest_benchmark.utils import NameWrapper

        session = self.request.config._benchmarksession
        node = self.request.node
        options = dict(session.options, timer=NameWrapper(_Replay(timing.samples)), disable_gc=True)
        fixture = BenchmarkFixture(node, add_stats=session.benchmarks.append, logger=session.logger,
                                   warner=node.warn, disabled=session.disabled, group=node.name, **options)
        if label is not None:
            fixture.name, fixture.fullname = f"{node.name}[{label}]", f"{node.nodeid}[{label}]"
        fixture.extra_info.update(tpucourse_calls_per_sample=timing.calls_per_sample,
                                  tpucourse_overhead_s=timing.overhead, tpucourse_stopped=timing.stopped,
                                  tpucourse_method=timing.method, tpucourse_dispatch_bound=timing.dispatch_bound,
                                  tpucourse_sized_by=timing.sized_by)
        fixture.pedantic(lambda: None, rounds=len(timing.samples), iterations=1)
        fixture._cleanup()


class _Replay:
    """A clock for pytest-benchmark that replays the harness's samples: each round it reads the
    clock twice, and the second reading is the first plus that round's sample."""

    __name__ = "tpucourse_device_time_samples"

    def __init__(self, samples):
        self._ticks = iter([t for i, s in enumerate(samples) for t in (float(i), float(i) + s)])

    def __call__(self) -> float:
        return next(self._ticks)
