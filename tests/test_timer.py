"""Timing: the harness on a fake clock, verdicts on a confidence interval, the trio, and pytest-benchmark.

No accelerator is available to these tests and none asserts on real time. The harness runs
with a fake clock whose "device" advances by a chosen time per call; GateRun runs with a fake
harness (tests/gate_helpers.py); the pytest-benchmark path runs on a TPU stand-in. They prove
what the code does with times, never a number about a chip.
"""

import gc
import json

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria, judge, report, stats, timer
from pytest_tpucourse.gates import records as rec

from .gate_helpers import FakeHarness, gate_run, read_judged, samples, standin_conftest

COST = roofline.elementwise_cost((256, 256), "bfloat16")
FLOOR = 3 * 256 * 256 * 2 / 8.2e11  # v5e roofline floor of that add
SLOT = criteria.gate(3).criterion("beats-xla").slots[0]  # one of gate 03's eight target slots


# ------------------------------------------------------------------ statistics


def test_the_median_interval_is_distribution_free():
    ten = list(range(10, 0, -1))
    assert stats.median_interval(ten) == (2, 9)  # 2nd smallest, 2nd largest: 97.9% coverage
    assert stats.median_interval(range(6)) == (0, 5)
    assert stats.median_interval(range(5)) is None  # no 95% interval from 5 samples
    assert stats.median([3, 1, 2, 10]) == 2.5 and stats.iqr([1, 2, 3, 4, 5]) == 2.0
    with pytest.raises(ValueError, match="cannot be paired"):
        stats.paired_ratios([1, 2], [1])


def test_a_tie_never_beats():
    beats = criteria.gate(3).criterion("beats-xla").ratio_range  # (0, 0.8)
    tie = judge.judge_ratios([0.8 * (1 + 0.01 * ((3 * i) % 7 - 3)) for i in range(12)], beats)
    assert tie.median == pytest.approx(0.8) and tie.verdict == "fail"  # its interval reaches past 0.8
    clear = judge.judge_ratios(samples(0.7), beats)
    assert clear.verdict == "pass" and clear.interval[1] < 0.8
    assert judge.judge_ratios([0.5] * 5, beats).verdict == "fail"  # too few rounds for an interval


# ------------------------------------------------------------------ the harness, on a fake clock


class Device:
    """A fake device: calls queue work, a sync waits for it; the clock is its time."""

    def __init__(self, sync_latency=5e-6, dispatch=2e-6):
        self.now, self.pending, self.sync_latency, self.dispatch = 0.0, 0.0, sync_latency, dispatch
        self.calls, self.gc_during_calls = [], []

    def clock(self):
        return self.now

    def op(self, name, seconds):
        def call(*args):
            self.calls.append(name)
            self.gc_during_calls.append(gc.isenabled())
            self.now += self.dispatch  # host dispatch, which overlaps the device's queue
            self.pending = max(self.pending, self.now) + seconds
            return name
        return call

    def sync(self, _out):
        self.now = max(self.now, self.pending) + self.sync_latency

    def harness(self, **kw):
        empty = self.op("empty", 0.0)
        return timer.Harness(clock=self.clock, sync=self.sync, empty=(empty, ()), **kw)


def test_samples_are_device_time_per_call_not_dispatch():
    device = Device()
    timings = device.harness(budget=1.0).measure({"kernel": device.op("kernel", 1e-4)}, [(1,), (2,), (3,)])
    t = timings["kernel"]
    assert t.summary.median == pytest.approx(1e-4, rel=1e-6)  # the empty sample's overhead is taken off
    assert 99 <= t.calls_per_sample <= 101  # ~SAMPLE_SECONDS (10 ms) of calls per sync
    assert t.stopped == "interval" and t.summary.rounds == stats.MIN_ROUNDS  # no noise: tight at once
    assert t.dispatch == pytest.approx(2e-6, rel=0.02) and not t.dispatch_bound


def test_an_op_shorter_than_dispatch_is_flagged():
    device = Device(dispatch=1e-5)
    t = device.harness().measure({"tiny": device.op("tiny", 1e-7)}, [(1,)])["tiny"]
    assert t.dispatch_bound and "dispatch-bound" in t.describe()


class DeviceTrace:
    """A fake profiler: the device time of the work it traces is the fake device's busy time in it."""

    def __init__(self, device, records=True):
        self.device, self.records, self.traces = device, records, 0

    def time(self, work):
        self.traces += 1
        busy = self.device.busy
        work()
        return (self.device.busy - busy) if self.records else None


class BusyDevice(Device):
    """A fake device that also counts the seconds it worked (what a device trace records)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.busy = 0.0

    def op(self, name, seconds):
        call = super().op(name, seconds)

        def counted(*args):
            self.busy += seconds
            return call(*args)
        return counted


def test_device_time_comes_from_the_trace_and_a_slow_host_is_named_dispatch_bound():
    device = BusyDevice(dispatch=1.2e-4)  # the host issues a call every 120 us
    harness = device.harness(device_clock=DeviceTrace(device))
    t = harness.measure({"skinny": device.op("skinny", 4.6e-5)}, [(1,)])["skinny"]
    assert t.method == timer.DEVICE_PROFILER
    assert t.summary.median == pytest.approx(4.6e-5, rel=1e-9)  # the device's 46 us, not the host's 120
    assert stats.median(t.wall_per_call) == pytest.approx(1.2e-4, rel=0.05)
    assert t.dispatch_bound and "dispatch-bound: the host issued a call every 120" in t.describe()
    busy = device.harness(device_clock=DeviceTrace(device)).measure(
        {"matmul": device.op("matmul", 7.2e-4)}, [(1,)])["matmul"]
    assert busy.summary.median == pytest.approx(7.2e-4) and not busy.dispatch_bound
    assert "device time from the profiler's trace" in busy.describe()


def test_a_trace_without_device_time_falls_back_to_the_wall_clock():
    device = BusyDevice()
    t = device.harness(device_clock=DeviceTrace(device, records=False)).measure(
        {"kernel": device.op("kernel", 1e-4)}, [(1,)])["kernel"]
    assert t.method == timer.WALL_CALLS and t.wall_per_call == ()
    assert t.summary.median == pytest.approx(1e-4, rel=1e-6) and "wall clock" in t.describe()


def test_device_seconds_sums_the_xla_modules_of_the_device_planes():
    from types import SimpleNamespace as NS

    def event(ns):
        return NS(duration_ns=ns)

    profile = NS(planes=[
        NS(name="/host:CPU", lines=[NS(name="XLA Modules", events=[event(10**9)])]),
        NS(name="/device:TPU:0", lines=[NS(name="XLA Modules", events=[event(46_000), event(47_000)]),
                                        NS(name="XLA Ops", events=[event(40_000)])]),
    ])
    assert timer.device_seconds(profile) == pytest.approx(93e-6)
    assert timer.device_seconds(NS(planes=[NS(name="/host:CPU", lines=[])])) is None
    assert timer.harness_for("tpu").device_clock is not None and timer.harness_for("cpu").device_clock is None


class ProgramTrace(DeviceTrace):
    """A fake profiler that also lists the programs the traced work ran, as the device's trace does."""

    def events(self, work):
        self.traces += 1
        first = len(self.device.programs)
        work()
        return list(self.device.programs[first:])


class ProgramDevice(BusyDevice):
    """A fake device whose calls run named programs: op(name, seconds, programs=k) runs k of them."""

    def __init__(self, stray_every=0, **kw):
        super().__init__(**kw)
        self.programs, self.stray_every, self.ran = [], stray_every, 0

    def op(self, name, seconds, programs=1):
        call = super().op(name, seconds)

        def run(*args):
            self.ran += 1
            for i in range(programs):
                self.programs.append((f"jit_{name}_{i}", seconds / programs))
            if self.stray_every and self.ran % self.stray_every == 0:
                self.programs.append(("jit_stray", 1e-3))  # a program no call of the op runs every time
            return call(*args)
        return run


def test_rounds_are_traced_in_blocks_and_each_sample_cut_from_its_block():
    device = ProgramDevice()
    clock = ProgramTrace(device)
    fns = {"floor": device.op("floor", 2e-4), "kernel": device.op("kernel", 1e-4, programs=3),
           "ceiling": device.op("ceiling", 1.2e-4)}
    timings = device.harness(device_clock=clock).measure(fns, [(1,), (2,)])
    assert {name: t.summary.median for name, t in timings.items()} == pytest.approx(
        {"floor": 2e-4, "kernel": 1e-4, "ceiling": 1.2e-4}, rel=1e-9)
    assert all(t.method == timer.DEVICE_PROFILER and t.summary.rounds == stats.MIN_ROUNDS
               and len(t.wall_per_call) == stats.MIN_ROUNDS for t in timings.values())
    # the device check, one trace of a call of each implementation between empty calls, then the first
    # MIN_ROUNDS rounds in one
    assert clock.traces == 1 + 1 + 1
    assert timings["kernel"].programs == ("jit_kernel_0", "jit_kernel_1", "jit_kernel_2")  # the rows name them
    assert all(t.traces == 1 and "; 1 traces for the measurement's samples (rounds traced together)" in t.describe()
               for t in timings.values())  # the rows say how the samples were traced
    again = device.harness(device_clock=ProgramTrace(device))
    again.measure(fns, [(1,)])
    traces = again.device_clock.traces
    again.measure(fns, [(1,)])
    assert again.device_clock.traces - traces == 1 + 1  # the device check is made once per harness


def test_a_call_running_the_empty_calls_program_gets_a_trace_of_its_own():
    """The calls' programs are read from one trace cut at the empty call's program; an implementation
    that runs a program of that name too makes the cut ambiguous, and each call is traced alone."""
    device = ProgramDevice()
    clock = ProgramTrace(device)
    fns = {"floor": device.op("floor", 2e-4), "kernel": device.op("empty", 1e-4)}  # named like the empty call
    timings = device.harness(device_clock=clock).measure(fns, [(1,)])
    assert clock.traces == 1 + 1 + 2 + 1  # the device check, the shared trace refused, one each, the block
    assert timings["kernel"].summary.median == pytest.approx(1e-4) and timings["kernel"].calls_per_sample == 100


def test_a_trace_that_cannot_be_cut_exactly_goes_back_to_one_trace_per_sample():
    device = ProgramDevice(stray_every=7)  # now and then a program that is not one of a call's
    clock = ProgramTrace(device)
    fns = {"floor": device.op("floor", 2e-4), "kernel": device.op("kernel", 1e-4)}
    timings = device.harness(device_clock=clock, warmup=0.0, sample=1e-4).measure(fns, [(1,)])
    assert clock.traces == 1 + 1 + 1 + 2 * stats.MIN_ROUNDS  # the block, then every sample traced alone
    assert timings["floor"].traces == 1 + 2 * stats.MIN_ROUNDS
    assert "traces for the measurement's samples (one per sample)" in timings["floor"].describe()
    assert timings["floor"].summary.median == pytest.approx(2e-4, rel=1e-9)  # the stray's time is not in a median


class NoisySyncDevice(ProgramDevice):
    """A TPU host's sync: 0.5 to 3 ms, noisy by several times from one sync to the next."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.latencies = iter([3e-3, 0.6e-3, 2.8e-3, 0.5e-3, 3.1e-3, 0.7e-3] * 10_000)

    def sync(self, _out):
        self.now = max(self.now, self.pending) + next(self.latencies)


def test_calls_per_sample_are_sized_by_one_calls_device_time_not_the_hosts_sync():
    matmul = 7.38e-4
    device = NoisySyncDevice()
    t = device.harness(device_clock=ProgramTrace(device)).measure({"matmul": device.op("matmul", matmul)},
                                                                   [(1,)])["matmul"]
    assert t.sized_by == timer.SIZED_BY_DEVICE and t.calls_per_sample == 14  # 10 ms of device time a sample
    assert "14 calls (N from one call's device time)" in t.describe()
    assert t.summary.median == pytest.approx(matmul)
    # The host's clock alone, on the same host, clamps N at its ceiling: the sync hides the call.
    host = NoisySyncDevice()
    t = host.harness().measure({"matmul": host.op("matmul", matmul)}, [(1,)])["matmul"]
    assert t.sized_by == timer.SIZED_BY_HOST and t.calls_per_sample == timer.MAX_CALLS_PER_SAMPLE
    # a profiler that gives device time but no program list (one trace per sample) sizes N by it too
    device = NoisySyncDevice()
    t = device.harness(device_clock=DeviceTrace(device)).measure({"matmul": device.op("matmul", matmul)},
                                                                  [(1,)])["matmul"]
    assert t.sized_by == timer.SIZED_BY_DEVICE and t.calls_per_sample == 14


def test_a_trace_of_several_devices_still_times_by_device_and_sizes_n_by_it():
    """events() cannot say whose programs are whose with several device planes; time() still can."""
    class SeveralPlanes(ProgramTrace):
        def events(self, work):
            self.traces += 1
            work()
            return None

    device = NoisySyncDevice()
    t = device.harness(device_clock=SeveralPlanes(device)).measure({"matmul": device.op("matmul", 7.38e-4)},
                                                                    [(1,)])["matmul"]
    assert t.method == timer.DEVICE_PROFILER and t.sized_by == timer.SIZED_BY_DEVICE and t.calls_per_sample == 14


class OpDevice(ProgramDevice):
    """A fake device whose programs list the ops they ran: op(name, seconds, ops={op: share})."""

    def op(self, name, seconds, ops=None):
        call = super().op(name, seconds)

        def run(*args):
            out = call(*args)
            program, spent = self.programs[-1]
            self.programs[-1] = timer.DeviceEvent(program, spent, tuple(
                timer.OpTime(op, "custom-call" if op.startswith("custom") else "", spent * share)
                for op, share in (ops or {}).items()))
            return out
        return run


def test_each_timing_carries_the_per_op_device_time_of_its_samples():
    device = OpDevice()
    fns = {"ceiling": device.op("ceiling", 1e-3, ops={"convert_multiply_fusion": 0.1, "custom-call.1": 0.8,
                                                     "convert_fusion": 0.1}),
           "floor": device.op("floor", 2e-3, ops={"fusion.3": 1.0})}
    timings = device.harness(device_clock=ProgramTrace(device)).measure(fns, [(1,), (2,)])
    ops = timings["ceiling"].ops
    assert [op.name for op in ops] == ["custom-call.1", "convert_multiply_fusion", "convert_fusion"]
    assert [op.seconds for op in ops] == pytest.approx([8e-4, 1e-4, 1e-4])  # per call, median of the samples
    assert ops[0].category == "custom-call"
    assert [(op.name, op.seconds) for op in timings["floor"].ops] == [("fusion.3", pytest.approx(2e-3))]
    assert timer.op_breakdown([]) == ()


def test_split_samples_takes_only_a_trace_that_is_exactly_the_calls_it_ran():
    events = [("a", 1.0), ("b", 2.0), ("a", 1.0), ("b", 2.0), ("c", 5.0)]
    assert timer.split_samples(events, [(("a", "b"), 2), (("c",), 1)]) == [3.0, 5.0]
    assert timer.split_samples(events, [(("a", "b"), 2)]) is None  # a program left over
    assert timer.split_samples(events, [(("a", "b"), 2), (("c",), 2)]) is None  # a call missing
    assert timer.split_samples(events, [(("a",), 1), (("b", "a", "b"), 1), (("c",), 1)]) == [1.0, 5.0, 5.0]
    assert timer.split_samples(events, [(("b", "a"), 2), (("c",), 1)]) is None  # another program's place
    assert timer.split_samples(events, [((), 3)]) is None


def test_device_events_are_the_one_device_planes_programs_in_the_order_they_ran():
    from types import SimpleNamespace as NS

    def event(name, start, ns):
        return NS(name=name, start_ns=start, duration_ns=ns)

    one = NS(planes=[NS(name="/host:CPU", lines=[NS(name="XLA Modules", events=[event("host", 0, 9)])]),
                     NS(name="/device:TPU:0", lines=[NS(name="XLA Modules", events=[event("b", 2000, 2000),
                                                                                   event("a", 10, 1000)]),
                                                     NS(name="XLA Ops", events=[event("op", 10, 500),
                                                                                event("copy", 600, 300),
                                                                                event("fusion", 2500, 1400)])])])
    assert [e.program for e in timer.device_events(one)] == ["a", "b"]
    assert [e.seconds for e in timer.device_events(one)] == pytest.approx([1e-6, 2e-6])
    # each op goes with the program it started in
    assert [[op.name for op in e.ops] for e in timer.device_events(one)] == [["op", "copy"], ["fusion"]]
    assert timer.device_events(one)[1].ops[0].seconds == pytest.approx(1.4e-6)
    two = NS(planes=one.planes + [NS(name="/device:TPU:1", lines=[NS(name="XLA Modules",
                                                                     events=[event("a", 10, 1000)])])])
    assert timer.device_events(two) is None  # which device's events are whose sample: not guessed
    assert timer.device_events(NS(planes=[])) is None


def test_implementations_are_interleaved_round_by_round_with_gc_off():
    device = Device()
    fns = {name: device.op(name, s) for name, s in (("floor", 2e-3), ("kernel", 1e-3), ("ceiling", 1e-3))}
    harness = device.harness(warmup=0.0, sample=1e-4)  # every op is longer: one call per sample
    first = len(device.calls)
    timings = harness.measure(fns, [(1,)])
    rounds = [c for c in device.calls[first:] if c != "empty"]
    timed = rounds[-3 * stats.MIN_ROUNDS:]  # each sample is one call here (1 ms target)
    orders = [tuple(timed[3 * i:3 * i + 3]) for i in range(3)]
    assert orders == [("floor", "kernel", "ceiling"), ("kernel", "ceiling", "floor"), ("ceiling", "floor", "kernel")]
    assert not any(device.gc_during_calls[-3 * stats.MIN_ROUNDS:]) and gc.isenabled()
    assert {name: t.summary.rounds for name, t in timings.items()} == dict.fromkeys(fns, stats.MIN_ROUNDS)


def test_warm_up_is_by_time():
    def calls_with(warmup):
        device = Device()
        device.harness(warmup=warmup, sample=1e-4).measure({"slow": device.op("slow", 0.01)}, [(1,)])
        return device.calls.count("slow")

    assert 14 <= calls_with(0.2) - calls_with(0.05) <= 16  # 150 ms more warm-up: 15 more 10 ms calls


def test_rounds_go_on_until_the_interval_is_tight_or_the_budget_ends():
    device = Device()
    noise = iter([1e-3 * (1 + 0.2 * ((7 * i) % 11 - 5) / 5) for i in range(10_000)])

    def noisy(*args):
        device.now += 1e-6
        device.pending = max(device.pending, device.now) + next(noise)

    t = device.harness(warmup=0.0, sample=1e-3, budget=0.1, target=0.001).measure({"noisy": noisy}, [(1,)])["noisy"]
    assert t.stopped == "budget" and stats.MIN_ROUNDS < t.summary.rounds < timer.MAX_ROUNDS


def test_a_flush_runs_before_every_sample_and_only_gpus_get_one(monkeypatch):
    device = Device()
    flushes = []
    harness = device.harness(warmup=0.0, sample=1e-3, flush=lambda: flushes.append(len(device.calls)))
    harness.measure({"a": device.op("a", 1e-3), "b": device.op("b", 1e-3)}, [(1,)])
    assert len(flushes) == 2 * stats.MIN_ROUNDS
    monkeypatch.setattr(timer, "l2_flusher", lambda: "flush")
    assert timer.harness_for("gpu").flush == "flush" and timer.harness_for("tpu").flush is None


def test_an_implementation_that_raises_is_named():
    device = Device()

    def broken(*args):
        raise NotImplementedError("no kernel at this size")

    with pytest.raises(timer.ImplementationFailed, match="kernel raised NotImplementedError: no kernel at this size"):
        device.harness().measure({"floor": device.op("floor", 1e-3), "kernel": broken}, [(1,)])


# ------------------------------------------------------------------ the trio


def _trio(run, criteria_=("beats-xla", "near-ceiling"), **kw):
    fns = dict(floor=lambda x: x, kernel=lambda x: x, ceiling=lambda x: x)
    return run.measure_trio(criteria_, SLOT.op, SLOT.shapes, SLOT.dtype, kw.pop("cost", COST),
                            inputs=kw.pop("inputs", lambda seed: (float(seed),)), **{**fns, **kw})


def test_a_trio_writes_one_row_per_implementation_and_judges_the_kernel(tmp_path):
    run = gate_run(tmp_path, seconds={"floor": 1e-4, "kernel": 7e-5, "ceiling": 6.5e-5})
    result = _trio(run)
    assert result.status == "pass" and run.results == [result]
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected  # every row the writer made survives re-judging
    for criterion in ("beats-xla", "near-ceiling"):
        mine = {r.implementation: r for r in rows if r.criterion == criterion and r.method == "measured"}
        assert mine["floor"].verdict == "reference" and mine["kernel"].verdict == "pass"
        assert mine["kernel"].ratio_to_floor == pytest.approx(0.7)
        assert len({r.run_id for r in mine.values()}) == 1 and len(mine["kernel"].samples) == 12
        assert mine["kernel"].ratio_ci[1] < (0.8 if criterion == "beats-xla" else 1.15)  # the judged ratio's
    assert mine["ceiling"].verdict == "reference" and mine["kernel"].ratio_to_ceiling == pytest.approx(7 / 6.5)
    statuses = report.gate_statuses(rows, "v5e")[3]
    assert statuses["correct"] == "awaiting hardware"
    # gate 03 lists 8 slots per speed criterion: one measured slot is not a pass
    assert statuses["beats-xla"] == statuses["near-ceiling"] == "awaiting hardware"
    assert sorted(run.store.stored, key=str) == sorted([None, "floor", "ceiling"], key=str)


@pytest.mark.parametrize("kernel_s, ceiling_s, failed", [
    (9e-5, 8.5e-5, "beats-xla: kernel 90.0 us is 0.90x the floor"),  # not decisively faster than XLA
    (7.6e-5, 6.5e-5, "near-ceiling: kernel 76.0 us is 1.17x the ceiling"),  # too far behind the ceiling
])
def test_a_slow_kernel_fails_its_criterion_and_the_row_stays(tmp_path, kernel_s, ceiling_s, failed):
    run = gate_run(tmp_path, seconds={"floor": 1e-4, "kernel": kernel_s, "ceiling": ceiling_s})
    result = _trio(run)
    assert result.status == "fail" and failed in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected and [r.criterion for r in rows if r.verdict == "fail"] == [failed.split(":")[0]]
    assert report.gate_statuses(rows, "v5e")[3][failed.split(":")[0]] == "fail"


def test_timed_outputs_are_checked_before_and_after_timing(tmp_path):
    """Right on the sets it is timed on, wrong on a fresh seed (answers kept for three inputs, none
    computed for a fourth): a fail row, no time. The wrong answer is zeros, wrong by any tolerance: a
    replay of another seed's answer would be within the check's bound of this one's whenever the two
    drawn seeds happen to lie within that bound of each other (inputs full of one seed's value)."""
    import jax.numpy as jnp

    seen = {}

    def kernel(x):  # remembers its first answers; for unknown inputs, an answer it never computed
        key = float(x[0, 0])
        if key in seen or len(seen) < 3:
            return seen.setdefault(key, x + 1)
        return jnp.zeros_like(x)

    run = gate_run(tmp_path, seconds={"floor": 1e-4, "kernel": 1e-5})
    result = _trio(run, criteria_="beats-xla", floor=lambda x: x + 1, kernel=kernel, ceiling=None,
                   inputs=lambda seed: (jnp.full((64, 128), float(seed), jnp.float32),))
    assert result.status == "fail" and "after timing, on inputs of seed" in result.message
    rows, _ = read_judged(tmp_path / "r.jsonl")
    kernel_rows = [r for r in rows if r.implementation == "kernel"]
    assert [(r.statistic, r.verdict, r.unit) for r in kernel_rows] == [("timed-output-check", "fail", "check")]
    assert report.gate_statuses(rows, "v5e")[3]["beats-xla"] == "fail"


def test_a_kernel_raising_at_the_gate_size_leaves_a_fail_row(tmp_path):
    def kernel(x):
        raise NotImplementedError("only small shapes")

    run = gate_run(tmp_path, seconds={"floor": 1e-4})
    result = _trio(run, criteria_="beats-xla", kernel=kernel, ceiling=None)
    assert result.status == "fail" and "kernel raised NotImplementedError: only small shapes" in result.message
    [row] = [r for r in read_judged(tmp_path / "r.jsonl")[0] if r.method == "measured"]
    assert (row.implementation, row.verdict, row.statistic) == ("kernel", "fail", "timed-output-check")
    assert run.harness.asked == []  # nothing was timed


def test_the_ceiling_is_the_fastest_correct_candidate_of_a_sweep(tmp_path):
    harness = FakeHarness({"floor": 1e-4, "kernel": 6.5e-5, "ceiling": 6e-5, "128": 8e-5, "512": 6e-5, "wrong": 1e-6})
    run = gate_run(tmp_path, harness=harness)
    result = _trio(run, criteria_="near-ceiling", ceiling={"128": lambda x: x, "512": lambda x: x,
                                                          "wrong": lambda x: x * 0 - 7})
    assert result.status == "pass"
    assert harness.asked[0] == ("128", "512")  # the wrong candidate is never timed
    [ceiling] = [r for r in read_judged(tmp_path / "r.jsonl")[0] if r.implementation == "ceiling"]
    assert "ceiling tuned over 3 block sizes" in ceiling.notes and "chose 512" in ceiling.notes
    assert "wrong: wrong or failed" in ceiling.notes


def test_on_a_gpu_tpu_kernels_are_not_runnable_never_passed(tmp_path):
    run = gate_run(tmp_path, platform="gpu", device_kind="NVIDIA H200", chip="h200", seconds={"floor": 1e-4})
    result = _trio(run)
    assert result.status == "not runnable here" and "measured: floor" in result.message
    assert run.harness.asked == [("floor",)]  # only XLA was timed
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    measured = {(r.criterion, r.implementation): r.verdict for r in rows if r.method == "measured"}
    assert measured == {("beats-xla", "kernel"): "not-runnable", ("near-ceiling", "kernel"): "not-runnable",
                        ("near-ceiling", "ceiling"): "not-runnable", ("beats-xla", "floor"): "reference",
                        ("near-ceiling", "floor"): "reference"}
    assert set(report.gate_statuses(rows, "h200")[3].values()) == {"awaiting hardware", "not runnable here"}
    assert report.gates_passed(rows) == 0


def test_on_a_cpu_a_trio_only_predicts(tmp_path):
    run = gate_run(tmp_path, platform="cpu", device_kind="cpu", seconds={})
    result = _trio(run)
    assert result.status == "awaiting hardware"
    assert result.message.startswith("awaiting hardware: attention-fwd bfloat16 roofline floor predicted for v5e")
    rows, _ = read_judged(tmp_path / "r.jsonl")
    assert {(r.criterion, r.method, r.implementation) for r in rows} == {
        ("beats-xla", "roofline-predicted", "floor"), ("near-ceiling", "roofline-predicted", "floor")}
    assert rows[0].value == pytest.approx(FLOOR) and rows[0].cost == {"flops": COST.flops, "bytes": COST.bytes}
    assert run.harness.asked == []
    _trio(gate_run(tmp_path, platform="cpu", device_kind="cpu"))
    assert len(rec.read(tmp_path / "r.jsonl").records) == 2  # the same prediction is not appended twice


def test_the_roofline_marker_gives_the_cost_of_the_recorded_floor(tmp_path):
    marker = roofline.Cost(flops=1e9, bytes=8.2e5)  # v5e: 5.1 us of compute, 1 us of HBM traffic
    run = gate_run(tmp_path, platform="cpu", device_kind="cpu", marker_cost=marker)
    _trio(run, cost=None)
    rows = rec.read(tmp_path / "r.jsonl").records
    assert [r.value for r in rows] == [pytest.approx(1e9 / 1.97e14)] * 2  # compute-bound: 5.1 us
    assert {r.notes for r in rows} == {"compute-bound"}
    with pytest.raises(ValueError, match="no cost for the roofline floor"):
        _trio(gate_run(tmp_path, platform="cpu", device_kind="cpu"), cost=None)
    with pytest.raises(ValueError, match=r"the call's cost \(65536 FLOPs.*disagrees with its roofline marker \(1e\+09"):
        _trio(run)


@pytest.mark.parametrize("kw, message", [
    (dict(criteria_="correct"), "criterion correct is not judged against a measured floor or ceiling"),
    (dict(criteria_="fast"), "gate 03 has no criterion 'fast'"),
    (dict(ceiling=None), "criterion near-ceiling needs a ceiling kernel"),
    (dict(floor=None), "needs the XLA floor implementation"),
])
def test_a_trio_rejects_what_it_cannot_judge(tmp_path, kw, message):
    with pytest.raises((ValueError, KeyError), match=message):
        _trio(gate_run(tmp_path), **kw)
    assert not (tmp_path / "r.jsonl").exists()


def test_a_device_that_changed_since_the_start_writes_no_measured_row(tmp_path):
    from pytest_tpucourse.grading.backend import DeviceFacts

    run = gate_run(tmp_path, seconds={"floor": 1e-4, "kernel": 7e-5, "ceiling": 6e-5},
                   live_device=lambda: DeviceFacts("cpu", "cpu", 1))
    result = _trio(run)
    assert result.status == "fail" and "something rewrote the run's device" in result.message
    assert not [r for r in rec.read(tmp_path / "r.jsonl").records if r.method == "measured"]


# ------------------------------------------------------------------ gate 0 and correctness


def test_gate_zero_judges_xla_against_its_roofline_floor(tmp_path):
    run = gate_run(tmp_path, gate=0, seconds={"floor": 1.2 * FLOOR})
    result = run.measure_floor("roofline-predicts", "add", [(256, 256)] * 2, "bfloat16", COST, lambda x: x,
                               lambda seed: (seed,))
    assert result.status == "pass" and "is 1.20x its roofline floor" in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    [measured] = [r for r in rows if r.method == "measured"]
    assert not rejected and measured.ratio_to_floor == pytest.approx(1.2) and measured.cost is not None
    slow = gate_run(tmp_path, gate=0, seconds={"floor": 10 * FLOOR})
    assert slow.measure_floor("roofline-predicts", "add", [(256, 256)] * 2, "bfloat16", COST, lambda x: x,
                              lambda seed: (seed,)).status == "fail"


def _verify(run, check):
    return run.verify("correct", "matmul", [(8, 8), (8, 8)], "bfloat16", check)


def test_correctness_under_interpret_mode_is_off_chip_verified(tmp_path):
    run = gate_run(tmp_path, gate=1, platform="cpu", device_kind="cpu")
    result = _verify(run, lambda: None)
    [row] = result.rows
    assert (row.method, row.verdict, row.interpret, row.unit) == ("off-chip-verified", "pass", True, "check")
    assert result.status == criteria.PASS_OFF_CHIP
    natively = gate_run(tmp_path, gate=1, kernels_native=True)
    assert _verify(natively, lambda: None).rows[0].method == "measured"
    interpreted = gate_run(tmp_path, gate=1)  # a TPU, but an interpreter ran the kernels
    assert _verify(interpreted, lambda: None).rows[0].method == "off-chip-verified"


def test_a_failed_check_is_recorded_and_reported_and_a_todo_writes_nothing(tmp_path):
    from pytest_tpucourse.core.outcomes import Todo, WrongResult

    run = gate_run(tmp_path, gate=1, platform="cpu", device_kind="cpu")

    def wrong():
        raise WrongResult("matmul() in exercises/ch11/matmul.py: output is wrong: ...")

    result = _verify(run, wrong)
    assert result.status == "fail" and "output is wrong" in result.message
    assert rec.read(tmp_path / "r.jsonl").records[0].verdict == "fail"

    def todo():
        raise Todo("TODO: matmul() is not written yet.")

    with pytest.raises(Todo):
        _verify(run, todo)
    assert len(rec.read(tmp_path / "r.jsonl").records) == 1
    with pytest.raises(ValueError, match="not a correctness criterion"):
        run.verify("matmul-near-xla", "matmul", [(8, 8)], "bfloat16", lambda: None)


# ------------------------------------------------------------------ pytest-benchmark keeps the samples

REAL_HARNESS_TEST = """
    import jax
    import jax.numpy as jnp
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    @pytest.mark.roofline(flops=64 * 64, bytes=8.2e6)  # made up: a 10 us floor on v5e
    def test_add(gate_run):
        gate_run.measure_floor("roofline-predicts", "add", [(64, 64), (64, 64)], "bfloat16", None,
                               jax.jit(jnp.add), lambda seed: (jnp.full((64, 64), seed, jnp.bfloat16),) * 2)

    def _double(x_ref, o_ref):  # a kernel of the graded tree (exercises/): the gate's own-work check passes
        o_ref[...] = x_ref[...] + x_ref[...]

    def double(x):
        from jax.experimental import pallas as pl

        return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    @pytest.mark.gate(3)
    def test_trio(gate_run):
        gate_run.measure_trio("beats-xla", "double", [(64, 64)], "bfloat16", roofline.Cost(1, 1),
                              floor=jax.jit(lambda x: x * 2), kernel=jax.jit(double), ceiling=None,
                              inputs=lambda seed: (jnp.full((64, 64), seed, jnp.float32),), tpu_only=())
"""


def test_the_real_harness_stores_its_samples_in_pytest_benchmark(fake_course):
    pytester = fake_course.pytester
    (pytester.path / "conftest.py").write_text(standin_conftest())  # a TPU stand-in, the real harness
    fake_course.test_file(REAL_HARNESS_TEST, "test_gate.py")
    records, bench_json = pytester.path / "records.jsonl", pytester.path / "bench.json"
    result = fake_course.run("--gates", "--records", str(records), f"--benchmark-json={bench_json}", "-rsf")
    rows, rejected = read_judged(records)
    assert not rejected, rejected
    measured = {(r.gate, r.implementation): r for r in rows if r.method == "measured"}
    add = measured[(0, "floor")]
    assert add.ratio_to_floor == pytest.approx(add.value / 1e-5)  # the roofline marker's floor
    assert add.chip == "v5e" and add.device_kind == "TPU v5 lite" and len(add.samples) >= stats.MIN_ROUNDS
    assert "interleaved" in add.notes and "calls per sync" in add.notes
    kernel, floor = measured[(3, "kernel")], measured[(3, "floor")]
    assert kernel.run_id == floor.run_id and len(kernel.samples) == len(floor.samples)

    report_json = json.loads(bench_json.read_text())
    assert report_json["machine_info"]["tpucourse"]["device_kind"] == "TPU v5 lite"
    by_name = {b["name"]: b for b in report_json["benchmarks"]}
    assert sorted(by_name) == ["test_add", "test_trio", "test_trio[floor]"]
    assert by_name["test_trio"]["stats"]["median"] == pytest.approx(kernel.value)
    assert by_name["test_trio[floor]"]["stats"]["rounds"] == len(floor.samples)
    assert by_name["test_add"]["options"]["timer"].endswith("tpucourse_device_time_samples")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)  # a CPU's speed decides


def test_benchmarks_disabled_is_an_error_not_a_pass(fake_course):
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest())
    fake_course.test_file(REAL_HARNESS_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--records", str(records), "--benchmark-disable", "-k", "trio")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*gate timings are stored through pytest-benchmark, which is disabled*"])
    assert all(r.method != "measured" for r in rec.read(records).records)


def test_the_real_cpu_path_never_writes_measured(fake_course):
    """No stand-in: JAX's own CPU. A --gates run predicts and skips, and times nothing."""
    fake_course.test_file(REAL_HARNESS_TEST, "test_gate.py")
    records, bench_json = fake_course.pytester.path / "records.jsonl", fake_course.pytester.path / "b.json"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records), f"--benchmark-json={bench_json}")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=2)
    rows = rec.read(records).records
    assert rows and {(r.method, r.platform, r.verdict) for r in rows} == {("roofline-predicted", "cpu", "pending")}
    assert not bench_json.exists() or json.loads(bench_json.read_text())["benchmarks"] == []
