"""A trio's measurement beyond its verdict: inputs no kernel could know, an impossible time refused,
a declared custom call that timed wrapper passes, XLA in both input regimes, and what each row says
about its samples (N, per-op device time, MXU utilisation). Fake harnesses and fake profiles only:
no number here is about a chip."""

import dataclasses
import math

import numpy as np
import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import criteria, device_ops, report, sampling, timer
from pytest_tpucourse.gates import records as rec

from .gate_helpers import FakeHarness, gate_run, read_judged

SLOT = criteria.gate(1).criterion("matmul-near-xla").slots[0]
COST = roofline.matmul_cost(4096, 4096, 4096, "bfloat16")  # 697.7 us on a v5e, compute-bound
FLOOR_S = roofline.predict(chips.get_chip("v5e").per_device(), COST, "bfloat16").floor_seconds


def _matmul_trio(run, **kw):
    fns = dict(floor=lambda x, w: x @ w, kernel=lambda x, w: x @ w, ceiling=None)
    inputs = kw.pop("inputs", lambda seed: tuple(np.random.default_rng(seed).standard_normal((2, 8, 8))))
    return run.measure_trio("matmul-near-xla", SLOT.op, SLOT.shapes, SLOT.dtype, COST, inputs=inputs,
                            **{**fns, **kw})


class OpsHarness(FakeHarness):
    """A FakeHarness whose timings carry a per-op breakdown: {name: [(op, category, seconds), ...]}."""

    def __init__(self, seconds, ops):
        super().__init__(seconds, method="device-profiler", wall={name: 1e-3 for name in seconds})
        self.ops = ops

    def measure(self, fns, input_sets):
        out = super().measure(fns, input_sets)
        return {name: dataclasses.replace(t, ops=tuple(timer.OpTime(*op) for op in self.ops.get(name, ())),
                                          sized_by=timer.SIZED_BY_DEVICE, calls_per_sample=14,
                                          programs=(f"jit_{name}",))
                for name, t in out.items()}


# ------------------------------------------------------------------ inputs no kernel could know


def test_a_kernel_answering_the_inputs_it_memorised_never_meets_them(tmp_path):
    """Issue 56's attack: a kernel that recognises the timed inputs (a few leading values) and
    returns their outputs from memory. The timed sets are drawn from seeds drawn when the
    measurement starts, so the memory is never hit, and a kernel that is wrong elsewhere fails."""
    def inputs(seed):
        return (np.full((8, 8), float(seed)), np.eye(8))

    remembered = {float(inputs(seed)[0][0, 0]): inputs(seed)[0] for seed in range(3)}  # fixed seeds 0, 1, 2
    hits = []

    def memorising(x, w):
        if float(x[0, 0]) in remembered:
            hits.append(float(x[0, 0]))
            return remembered[float(x[0, 0])]
        return x @ w  # its own slow kernel otherwise: right, and timed honestly

    run = gate_run(tmp_path, gate=1, seconds={"floor": 7.6e-4, "kernel": 7.4e-4})
    assert _matmul_trio(run, kernel=memorising, inputs=inputs).status == "pass"
    assert hits == []
    kernel_row = next(r for r in read_judged(tmp_path / "r.jsonl")[0] if r.implementation == "kernel")
    assert len(kernel_row.input_seeds) == sampling.INPUT_SETS and set(kernel_row.input_seeds) != {0, 1, 2}

    def from_memory_only(x, w):  # zeros for anything it did not memorise
        return remembered.get(float(x[0, 0]), np.zeros_like(x))

    run = gate_run(tmp_path / "b", gate=1, seconds={"floor": 7.6e-4, "kernel": 1e-6})
    result = _matmul_trio(run, kernel=from_memory_only, inputs=inputs)
    assert result.status == "fail" and "before timing" in result.message and run.harness.asked == []


def test_seeds_are_drawn_afresh_for_every_measurement(monkeypatch):
    import os
    import random
    import secrets

    # graded code runs in the grader's process: whatever it replaces, the seeds stay the system's entropy
    monkeypatch.setattr(os, "urandom", lambda n: bytes(n))
    monkeypatch.setattr(secrets, "randbits", lambda k: 0)
    monkeypatch.setattr(random, "getrandbits", lambda k: 0)
    drawn = {tuple(sampling.draw_seeds(3)) for _ in range(20)}
    assert len(drawn) == 20 and all(0 <= s < 2 ** sampling.SEED_BITS for seeds in drawn for s in seeds)


def test_a_kernel_row_faster_than_the_chips_roofline_is_refused_as_impossible(tmp_path):
    run = gate_run(tmp_path, gate=1, seconds={"floor": 7.6e-4, "kernel": 0.5 * FLOOR_S})
    result = _matmul_trio(run)
    assert result.status == "fail" and "refused as impossible" in result.message
    assert f"below the roofline floor of v5e for this op ({FLOOR_S * 1e6:.2f} us" in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    kernel = [r for r in rows if r.implementation == "kernel" and r.method == "measured"]
    assert [(r.statistic, r.verdict, r.unit) for r in kernel] == [(rec.BELOW_ROOFLINE, "fail", "check")]
    assert report.gate_statuses(rows, "v5e")[1]["matmul-near-xla"] == "fail"
    # at the floor itself, a time is possible (a kernel can at best reach it)
    assert _matmul_trio(gate_run(tmp_path / "b", gate=1, seconds={"floor": 7.6e-4, "kernel": FLOOR_S * 1.01})
                        ).status == "pass"


# ------------------------------------------------------------------ per-op device time


WRAPPED_SPLASH = [("my_kernel.1", "", 7.0e-4), ("convert_multiply_fusion", "", 0.6e-4),
                  ("convert_fusion.2", "", 0.4e-4)]


def _ceiling_trio(tmp_path, ceiling_ops, **kw):
    seconds = {"floor": 2e-3, "kernel": 6.4e-4, "ceiling": 8e-4}
    run = gate_run(tmp_path, gate=3, harness=OpsHarness(seconds, {"ceiling": ceiling_ops,
                                                                  "floor": [("fusion.3", "", 2e-3)]}))
    slot = criteria.gate(3).criterion("beats-xla").slots[0]
    cost = roofline.Cost(1e6, 1e6)
    fns = dict(floor=lambda x: x, kernel=lambda x: x, ceiling=lambda x: x)
    return run.measure_trio(("beats-xla", "near-ceiling"), slot.op, slot.shapes, slot.dtype, cost,
                            inputs=lambda seed: (float(seed),), **{**fns, **kw})


def test_a_ceiling_declared_one_custom_call_that_times_wrapper_passes_is_an_error_naming_them(tmp_path):
    # The kinds come from the program's compiled instructions: a Pallas kernel's custom call is named
    # after the kernel (my_kernel.1), which no name rule would take for a custom call.
    hlo = ('  %convert_multiply_fusion = f32[512,512]{1,0} fusion(%p), kind=kLoop, calls=%fused_computation\n'
           '  %my_kernel.1 = f32[512,512]{1,0} custom-call(%convert_multiply_fusion), '
           'custom_call_target="tpu_custom_call"\n'
           '  ROOT %convert_fusion.2 = bf16[512,512]{1,0} fusion(%my_kernel.1), kind=kLoop, calls=%fused_computation.1\n')
    known = device_ops.hlo_kinds(hlo)
    assert known == {"convert_multiply_fusion": "fusion", "my_kernel.1": "custom-call", "convert_fusion.2": "fusion"}
    message = device_ops.beside_one_custom_call(device_ops.as_row([timer.OpTime(*op) for op in WRAPPED_SPLASH], known))
    assert "convert_multiply_fusion (fusion, 60.0 us)" in message and "convert_fusion.2 (fusion, 40.0 us)" in message
    assert device_ops.beside_one_custom_call(device_ops.as_row([timer.OpTime("my_kernel.1", "", 7e-4)], known)) is None


class Compiled:
    """A jitted function's stand-in: called, it is the identity; lowered and compiled, it shows `hlo`."""

    def __init__(self, hlo):
        self.hlo = hlo

    def __call__(self, x):
        return x

    def lower(self, *args):
        return self

    def compile(self):
        return self

    def as_text(self):
        return self.hlo


def test_a_trio_fails_a_declared_ceiling_whose_trace_shows_a_pass_beside_its_call(tmp_path):
    ceiling = Compiled('  %my_kernel.1 = f32[8]{0} custom-call(%p), custom_call_target="tpu_custom_call"\n'
                       '  %convert_multiply_fusion = f32[8]{0} fusion(%p), kind=kLoop\n'
                       '  %convert_fusion.2 = f32[8]{0} fusion(%q)\n')
    result = _ceiling_trio(tmp_path, WRAPPED_SPLASH, one_custom_call=("ceiling",), ceiling=ceiling)
    assert result.status == "fail" and "ceiling not timed as its model-code form" in result.message
    assert "convert_multiply_fusion" in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected and not [r for r in rows if r.implementation == "ceiling" and r.is_timing]
    # the same ceiling timed as one call passes, and its row carries the breakdown
    result = _ceiling_trio(tmp_path / "b", WRAPPED_SPLASH[:1], one_custom_call=("ceiling",), ceiling=ceiling)
    assert result.status == "pass"
    rows, _ = read_judged(tmp_path / "b" / "r.jsonl")
    row = next(r for r in rows if r.implementation == "ceiling" and r.is_timing)
    assert row.ops == ({"op": "my_kernel.1", "kind": "custom-call", "seconds": 7e-4},)
    assert "per-op device time per call: my_kernel.1 (custom-call) 700.0 us" in row.notes
    # undeclared, the wrapper passes are shown, not judged
    result = _ceiling_trio(tmp_path / "c", WRAPPED_SPLASH, ceiling=ceiling)
    assert result.status == "pass", result.message


def test_every_timed_row_says_n_what_sized_it_and_its_mxu_utilisation(tmp_path):
    run = gate_run(tmp_path, gate=1, harness=OpsHarness({"floor": 7.6e-4, "kernel": 7.4e-4}, {}))
    _matmul_trio(run)
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    timed = {r.implementation: r for r in rows if r.is_timing}
    assert {r.calls_per_sample for r in timed.values()} == {14}
    assert {r.sized_by for r in timed.values()} == {"device-time"}
    peak = chips.get_chip("v5e").per_device().peak_for("bfloat16")
    assert timed["kernel"].mxu == {"model_flops": COST.flops, "executed_flops": None,
                                   "utilisation": pytest.approx(COST.flops / (7.4e-4 * peak), rel=1e-3)}
    assert "MXU 94% of the chip's peak" in timed["kernel"].notes
    assert "XLA programs per call: jit_floor" in timed["floor"].notes


# ------------------------------------------------------------------ XLA in both regimes


def test_xla_is_timed_with_weights_fixed_and_all_rotating_and_judged_against_the_faster(tmp_path):
    seen = []

    def floor(x, w):
        seen.append(id(w))
        return x @ w

    # the chip's numbers: 763.9 us rotating three input sets, 721.7 us with one; the kernel 737.8 us either way
    run = gate_run(tmp_path, gate=1, seconds={"floor": 7.639e-4, "floor-weights-fixed": 7.217e-4, "kernel": 7.378e-4})
    result = _matmul_trio(run, floor=floor, weights=(1,))
    assert result.status == "pass" and "judged against the faster, weights-fixed" in result.message  # pytest -rP
    assert run.harness.asked == [("floor", "kernel", "floor-weights-fixed")]
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    timed = {r.implementation: r for r in rows if r.is_timing}
    assert timed["floor"].value == pytest.approx(7.217e-4, rel=0.01) and timed["floor"].xla_regime == "weights-fixed"
    assert "weights fixed 721.7 us, all inputs rotating 763.9 us; judged against the faster" in timed["floor"].notes
    assert timed["kernel"].ratio_to_floor == pytest.approx(7.378 / 7.217, rel=1e-3)
    # all rotating faster: the floor row says so
    run = gate_run(tmp_path / "b", gate=1, seconds={"floor": 7e-4, "floor-weights-fixed": 7.2e-4, "kernel": 6.9e-4})
    _matmul_trio(run, weights=(1,))
    floor_row = next(r for r in read_judged(tmp_path / "b" / "r.jsonl")[0] if r.implementation == "floor" and r.is_timing)
    assert floor_row.xla_regime == "all-rotating" and floor_row.value == pytest.approx(7e-4, rel=0.01)


def test_the_weights_fixed_regime_keeps_one_weight_array_and_rotates_the_rest():
    sets = [(np.full(2, i), np.full(2, 10 + i)) for i in range(3)]
    got = [sampling.weights_fixed(lambda x, w: (x[0], w[0]), sets[0], (1,))(*s) for s in sets]
    assert got == [(0, 10), (1, 10), (2, 10)]


def test_further_xla_programs_are_timed_in_the_same_rounds_and_said_on_the_floor_row(tmp_path):
    run = gate_run(tmp_path, gate=1, seconds={"floor": 8e-4, "kernel": 7.4e-4, "xla-fused": 7.7e-4})
    assert _matmul_trio(run, also={"xla-fused": lambda x, w: x @ w}).status == "pass"
    floor_row = next(r for r in read_judged(tmp_path / "r.jsonl")[0] if r.implementation == "floor" and r.is_timing)
    assert "xla-fused (timed in the same rounds): 770.0 us, 0.962x the floor" in floor_row.notes


def test_xlas_prefetch_is_read_off_its_compiled_program():
    import jax
    import jax.numpy as jnp

    assert device_ops.cross_program_prefetch(
        "%copy-start = (bf16[4096,4096]) copy-start(%args_0_.3), cross_program_prefetch_index=0")
    text = sampling.compiled_text(jax.jit(lambda a, b: a @ b), (jnp.ones((8, 8)), jnp.ones((8, 8))))
    assert "dot" in text and not device_ops.cross_program_prefetch(text)  # XLA:CPU prefetches nothing
    assert sampling.compiled_text(lambda a, b: a @ b, (1, 2)) is None  # not one jitted program: not guessed


def test_the_bench_page_and_the_site_show_n_mxu_and_each_rows_per_op_device_time(tmp_path):
    from pytest_tpucourse.site import bench

    ops = {"kernel": [("my_matmul.1", "custom-call", 7.4e-4)], "floor": [("copy-start", "", 4e-5),
                                                                          ("convolution.1", "", 7.2e-4)]}
    run = gate_run(tmp_path, gate=1, tree="solutions", harness=OpsHarness({"floor": 7.6e-4, "kernel": 7.4e-4}, ops))
    _matmul_trio(run)
    loaded = report.load([tmp_path / "r.jsonl"], chips.ChipRegistry(), tree="solutions")
    page = report.bench_readme(loaded)
    assert "| 14 (device time) | 94% |" in page
    assert "### Per-op device time on v5e" in page
    assert "- gate 01 matmul-near-xla matmul bfloat16 floor: convolution.1 (other) 720.0 us, copy-start (prefetch) 40.0 us" \
        in page
    lines = [dict(zip(bench.COLUMNS, line)) for line in bench.record_rows(loaded.accepted)]
    kernel = next(line for line in lines if line["implementation"] == "kernel" and line["N"])
    assert kernel["per-op device time"] == "my_matmul.1 (custom-call) 740.0 us" and kernel["MXU"] == "94%"


def test_outputs_are_compared_where_they_are_as_the_host_compares_them():
    """wrong_output's relative error, computed by one program beside the arrays, is the float64 rule's
    (tolerance.relative_error): non-finite reference entries left out, NaN or inf in an output wrong."""
    import jax.numpy as jnp

    from pytest_tpucourse.core import tolerance

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((64, 128)).astype(np.float32) * 1e4
    ref[0, :3] = [np.inf, -np.inf, np.nan]
    for got in (ref * 1.003, ref + rng.standard_normal(ref.shape).astype(np.float32), np.zeros_like(ref)):
        got = got.astype(np.float32)
        got[0, :3] = 7.0
        assert math.isclose(sampling.device_relative_error(jnp.asarray(got), jnp.asarray(ref)),
                            tolerance.relative_error(got, ref), rel_tol=1e-4)
    assert sampling.device_relative_error(jnp.zeros((4,)), jnp.zeros((4,))) == 0.0
    bad = np.ones((8, 128), np.float32)
    for value in (np.nan, np.inf):
        bad[3, 3] = value
        assert not sampling.device_relative_error(jnp.asarray(bad), jnp.ones((8, 128), jnp.float32)) <= 1.0
    wrong = sampling.wrong_output("kernel", lambda x: x * 1.5, [(jnp.ones((8, 128), jnp.bfloat16),)],
                                  [jnp.ones((8, 128), jnp.bfloat16)], "bfloat16")
    assert wrong.startswith("kernel output 0 on input set 0 is wrong at the timed size: relative error 0.5")
    assert sampling.wrong_output("kernel", lambda x: x.astype(jnp.float32), [(jnp.ones((8,), jnp.bfloat16),)],
                                 [jnp.ones((8,), jnp.bfloat16)], "bfloat16") == (
        "kernel output 0 on input set 0 is float32[8], expected bfloat16[8]")


def test_the_courses_programs_compile_ahead_in_threads_and_a_later_call_finds_them(monkeypatch):
    """compile_ahead compiles jitted programs side by side; their first call then compiles nothing. A
    function that is not one jitted program is left alone, and a failing compile is left to the call."""
    import jax
    import jax.numpy as jnp
    from jax._src import compiler

    compiles = []
    real = compiler.backend_compile_and_load
    monkeypatch.setattr(compiler, "backend_compile_and_load", lambda *a, **k: compiles.append(1) or real(*a, **k))
    floor = jax.jit(lambda x: jnp.tanh(x) * 3.0)
    ceiling = jax.jit(lambda x: jnp.cos(x) + 1.5)
    broken = jax.jit(lambda x: x @ jnp.ones((3, 3)))  # (8, 128) @ (3, 3): no program
    args = (jnp.ones((8, 128)),)
    futures = sampling.compile_ahead({"floor": floor, "ceiling": ceiling, "broken": broken,
                                      "plain": lambda x: x}, args)
    assert set(futures) == {"floor", "ceiling", "broken"}
    sampling.compiled(futures)
    assert [futures[n].result() for n in ("floor", "ceiling", "broken")] == [True, True, False]
    before = len(compiles)
    floor(*args), ceiling(*args)
    assert len(compiles) == before
    with pytest.raises(TypeError):
        broken(*args)


def test_timed_inputs_are_drawn_where_the_chip_is_one_array_per_seed():
    from pytest_tpucourse import strategies as tst

    a, b = tst.timed_input((4, 256), "bfloat16", 2 ** 33 + 7), tst.timed_input((4, 256), "bfloat16", 2 ** 33 + 7)
    c = tst.timed_input((4, 256), "bfloat16", 7)
    assert a.dtype == "bfloat16" and a.shape == (4, 256) and bool((a == b).all()) and not bool((a == c).all())
    assert 0.8 < float(a.astype("float32").std()) < 1.2
