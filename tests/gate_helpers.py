"""Helpers for the gate tests: an accelerator stand-in, a fake harness, rows built by the real writer.

No accelerator is available to the plugin's own tests. Two stand-ins take its place, and
only here, in the tests:
  - FakeHarness / FakeStore: given to a GateRun directly, they return chosen samples, so a
    test says "the kernel takes 70 us" and checks what the run writes and how it judges;
  - standin_conftest(): a conftest.py for a pytester course that makes the run see a TPU
    (it replaces the package's one device reader) and, unless told otherwise, replaces the
    harness's measurements with chosen times. What it shows is the code path that writes
    measured rows, never a number about any chip.
"""

from __future__ import annotations

import dataclasses
import textwrap

from pytest_tpucourse import chips
from pytest_tpucourse.gates import criteria, judge
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.provenance import Provenance
from pytest_tpucourse.gates.run import GateContext, GateRun
from pytest_tpucourse.gates.timer import Timing
from pytest_tpucourse.grading.backend import DeviceFacts

V5E_KIND = "TPU v5 lite"
ROUNDS = 12


GATES_TOTAL = len(criteria.GATES)  # every gate count in the tests is read from the gate table
NONE_PASSED = f"gates: 0/{GATES_TOTAL} gates passed"  # the summary's gate line before any gate passes
ADD_FLOOR = 3 * 4096 * 4096 * 2 / 8.2e11  # v5e roofline floor of gate 00's 4096² bf16 add slot (HBM-bound)

# A gate test of one of gate 00's slots, XLA's 4096² bf16 add, for pytester courses.
ADD_GATE_TEST = """
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    def test_add_near_floor(gate_run):
        import jax.numpy as jnp
        x = jnp.ones((4096, 4096), jnp.bfloat16)
        gate_run.measure_floor("roofline-predicts", "add", [(4096, 4096), (4096, 4096)], "bfloat16",
                               roofline.elementwise_cost((4096, 4096), "bfloat16"), jnp.add, lambda seed: (x, x))
"""


def samples(seconds: float, rounds: int = ROUNDS, spread: float = 0.002) -> tuple[float, ...]:
    """Deterministic samples around `seconds`, within +-3 spread of it."""
    return tuple(seconds * (1 + spread * ((3 * i) % 7 - 3)) for i in range(rounds))


_SAID_BY_TIMING = ("method", "wall_per_call", "dispatch_bound")


@dataclasses.dataclass(frozen=True)
class _SaidTiming(Timing):
    """A Timing that says how it was taken, for a harness whose Timing does not say it yet."""

    method: str = "wall-calls"
    wall_per_call: float | None = None
    dispatch_bound: bool = False


def timing(samples_, *, method=None, wall_per_call=None, dispatch_bound=False) -> Timing:
    """A harness's Timing of these samples; with `method`, one that says how it was timed."""
    base = dict(samples=tuple(samples_), calls_per_sample=1, overhead=0.0, dispatch=1e-9, stopped="interval")
    if method is None:
        return Timing(**base)
    said = dict(method=method, wall_per_call=wall_per_call, dispatch_bound=dispatch_bound)
    own = {f.name for f in dataclasses.fields(Timing)}
    return (Timing if set(_SAID_BY_TIMING) <= own else _SaidTiming)(**base, **said)


class FakeHarness:
    """Returns chosen samples per implementation; records what it was asked to time.

    method: the timing method its Timings say (None: they say nothing, as before the harness said);
    wall: seconds of host wall time per call, per implementation (device-profiler timings)."""

    def __init__(self, seconds: dict, calls=True, method=None, wall=None):
        self.seconds, self.asked, self.calls = seconds, [], calls
        self.method, self.wall = method, wall or {}

    def measure(self, fns, input_sets):
        self.asked.append(tuple(fns))
        for fn in fns.values():  # the implementations run, as they would on the chip
            for args in input_sets:
                fn(*args)
        out = {}
        for name in fns:
            wanted = self.seconds[name]
            wall = self.wall.get(name)
            out[name] = timing(tuple(wanted) if isinstance(wanted, (list, tuple)) else samples(wanted),
                               method=self.method, wall_per_call=wall)
        return out


class FakeStore:
    def __init__(self):
        self.stored = []

    def require(self):
        pass

    def store(self, label, timing):
        self.stored.append(label)


def gate_run(tmp_path, gate=3, platform="tpu", device_kind=V5E_KIND, chip="v5e", seconds=None,
             harness=None, marker_cost=None, tree="exercises", kernels_native=False,
             interpret_requested=False, devices=1, live_device=None, modules=None, tree_root=None,
             rehearsal=None, sweeps_path=None, resweep=False, jax="0.10.2", unconfirmed=(),
             course_sweeps_path=None) -> GateRun:
    """A GateRun writing to tmp_path/r.jsonl, judged by the real thresholds, timed by a fake."""
    context = GateContext(registry=chips.ChipRegistry(), chip=chips.get_chip(chip),
                          device=DeviceFacts(platform, device_kind, devices),
                          records_path=rehearsal.path if rehearsal else tmp_path / "r.jsonl", root=None,
                          interpret_requested=interpret_requested, kernels_native=kernels_native,
                          rehearsal=rehearsal, sweeps_path=sweeps_path, resweep=resweep,
                          course_sweeps_path=course_sweeps_path)
    return GateRun(
        context, gate=gate, chapter=criteria.gate(gate).chapter, test_id="t::gate",
        provenance=Provenance(platform, device_kind, jax, "0.10.2", None, None, None, tree, modules or {}),
        harness=harness or FakeHarness(seconds or {}), store=FakeStore(), marker_cost=marker_cost,
        live_device=live_device, tree_root=tree_root, unconfirmed=unconfirmed)


def make_record(**kw) -> rec.Record:
    """A row built by hand (a prediction unless told otherwise)."""
    base = dict(gate=0, criterion="roofline-predicts", chapter="ch10", test_id="t", tree="exercises",
                implementation="floor", op="add", shapes=[(4096, 4096), (4096, 4096)], dtype="bfloat16",
                chip="v5e", method="roofline-predicted", statistic="floor", value=1.228e-4, unit="s",
                verdict="pending", platform="cpu", device_kind="cpu", interpret=False, jax="0.10.2",
                jaxlib="0.10.2")
    return rec.Record(**{**base, **kw})


MEASURED = dict(method="measured", statistic="median", verdict="pass", platform="tpu", device_kind=V5E_KIND,
                timed_by="wall-calls")


def read_judged(path):
    """(accepted records, rejected) of a records file, re-judged with the built-in chips."""
    judged = judge.judge_rows(rec.read(path).rows, chips.ChipRegistry())
    return judged.records, judged.rejected


def standin_conftest(seconds: dict | None = None, *, platform="tpu", device_kind=V5E_KIND, devices=4,
                     per_element: bool = False, extra: str = "") -> str:
    """conftest.py source: the run sees `device_kind` and, with `seconds`, times every
    implementation as {label: seconds per call} (per_element: seconds per element of the first
    operand, so differently sized tests keep one ratio); without, the real harness runs, briefly."""
    return textwrap.dedent(f"""
        # A stand-in accelerator for the plugin's own tests (tests/gate_helpers.py).
        from pytest_tpucourse.gates import timer
        from pytest_tpucourse.grading import backend

        backend.device_facts = lambda: backend.DeviceFacts({platform!r}, {device_kind!r}, {devices})
        SECONDS = {seconds!r}
        PER_ELEMENT = {per_element!r}


        def _measure(self, fns, input_sets):
            for fn in fns.values():
                for args in input_sets:
                    fn(*args)
            scale = input_sets[0][0].size if PER_ELEMENT else 1
            return {{name: timer.Timing(tuple(SECONDS[name] * scale * (1 + 0.002 * ((3 * i) % 7 - 3))
                                             for i in range({ROUNDS})), 1, 0.0, 1e-9, "interval")
                    for name in fns}}


        if SECONDS is not None:
            timer.Harness.measure = _measure
        else:  # the real harness, on the CPU, kept short
            timer.BUDGET_SECONDS, timer.WARMUP_SECONDS, timer.SAMPLE_SECONDS = 1.0, 0.01, 0.001
    """) + textwrap.dedent(extra)
