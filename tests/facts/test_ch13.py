"""Chapter 13 (the priesthood kernels): what JAX's autodiff, Pallas and JAX's own flash and splash
kernels do, read off the installed toolchain. docs/facts.md lists each claim beside its test."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.tpu import flash_attention as jax_flash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as splash_mask

from pytest_tpucourse.public_kernels import course_solution
from pytest_tpucourse.readers import block_skipping, traced_program

from .toolchain import for_this_jax, interpreted, tpu_interpret

REPO = Path(__file__).resolve().parents[2]
S = jax.ShapeDtypeStruct


def doubled(x):
    return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                          out_shape=S(x.shape, x.dtype))(x)


def test_a_pallas_call_has_a_jvp_rule_and_no_transpose():
    """Forward mode works; reverse mode fails, gridded or not, scratch or not."""
    x = jnp.ones((8, 128), jnp.float32)
    with interpreted(True):
        _, tangent = jax.jvp(doubled, (x,), (x,))
        assert (np.asarray(tangent) == 2).all()
        with pytest.raises(Exception) as refused:
            jax.grad(lambda x: doubled(x).sum())(x)
    assert "Linearization failed to produce known values for all output primals" in str(refused.value)
    with interpreted(True), pytest.raises(Exception) as transposed:
        jax.linear_transpose(doubled, x)(x)
    assert for_this_jax({"0.10.2": "must override",
                         "0.11.2": "Transpose rule (for reverse-mode differentiation) for 'pallas_call' not implemented",
                         "0.12.0.1": "Transpose rule (for reverse-mode differentiation) for 'pallas_call' not implemented",
                         }) in str(transposed.value)


def kernel_primitives(eqn) -> list[str]:
    """The primitives of a pallas_call's kernel body, nested jaxprs (a pl.when's cond) included."""
    names = []

    def walk(jaxpr):
        for inner in jaxpr.eqns:
            names.append(inner.primitive.name)
            for value in inner.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    if hasattr(sub, "eqns"):
                        walk(sub)
                    elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                        walk(sub.jaxpr)

    walk(eqn.params["jaxpr"])
    return names


def backward_kernels(fn, *args):
    """The pallas_calls the VJP of sum(fn(*args)) runs beyond the forward's."""
    forward = traced_program.pallas_call_eqns(jax.make_jaxpr(fn)(*args))
    gradient = traced_program.pallas_call_eqns(jax.make_jaxpr(jax.grad(lambda *a: fn(*a).sum(), argnums=(0, 1, 2)))(*args))
    return gradient[len(forward):], gradient


def test_the_chapters_backward_runs_three_and_four_matmuls_in_two_kernels():
    flash_attention = course_solution(REPO, "ch13.backward.flash_attention")
    q = S((1, 1, 256, 64), jnp.float32)
    kernels, _ = backward_kernels(flash_attention, q, q, q)
    assert [kernel_primitives(k).count("dot_general") for k in kernels] == [3, 4]


def test_splash_attentions_fused_backward_is_one_kernel_of_five_matmuls_with_dq_partials():
    heads, length, block = 2, 256, 128
    sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                              block_kv_dkv=block, block_kv_dkv_compute=block, use_fused_bwd_kernel=True)
    with jax.ensure_compile_time_eval():
        kernel = splash.make_splash_mha(splash_mask.MultiHeadMask([splash_mask.CausalMask((length, length))] * heads),
                                        block_sizes=sizes, head_shards=1, q_seq_shards=1)
    q = S((heads, length, 64), jnp.float32)
    (fused,) = backward_kernels(kernel, q, q, q)[0]
    assert kernel_primitives(fused).count("dot_general") == 5  # S, dV, dP, dK and dQ
    outputs = [tuple(v.aval.shape) for v in fused.outvars]
    assert (length // block, heads, length, 64) in outputs  # a dq per kv block, summed after the kernel


def test_jax_flash_attentions_causal_mask_is_top_left():
    q = jax.random.normal(jax.random.key(0), (1, 1, 128, 128), jnp.float32)
    k = jax.random.normal(jax.random.key(1), (1, 1, 256, 128), jnp.float32)
    v = jax.random.normal(jax.random.key(2), (1, 1, 256, 128), jnp.float32)
    with interpreted(tpu_interpret()):
        out = np.asarray(jax_flash.flash_attention(q, k, v, causal=True, sm_scale=1.0, block_sizes=jax_flash.BlockSizes(
            block_q=128, block_k_major=128, block_k=128, block_b=1)))
    scores = np.einsum("qd,kd->qk", np.asarray(q[0, 0], np.float64), np.asarray(k[0, 0], np.float64))
    scores[np.triu_indices(128, 1, 256)] = -np.inf  # query i sees keys 0..i
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected = (p / p.sum(axis=1, keepdims=True)) @ np.asarray(v[0, 0], np.float64)
    np.testing.assert_allclose(out[0, 0], expected, atol=1e-4)


def test_jax_flash_attention_points_skipped_kv_steps_at_block_0():
    q = S((1, 1, 512, 128), jnp.float32)
    log = block_skipping.fetch_log(jax.make_jaxpr(functools.partial(jax_flash.flash_attention, causal=True))(q, q, q))
    keys = next(f for f in log if f.operand == 1)
    starts = keys.step_starts[:, 2].reshape(4, 4)  # (q block, kv step): the first key of the block fetched
    assert starts.tolist() == [[0, 0, 0, 0], [0, 128, 0, 0], [0, 128, 256, 0], [0, 128, 256, 384]]


def test_jax_flash_attention_refuses_blocks_it_does_not_take():
    q, kv = jnp.ones((1, 1, 256, 128)), jnp.ones((1, 1, 200, 128))
    with pytest.raises(ValueError) as refused:  # _verify_block: a kv length its block does not divide
        jax.eval_shape(lambda q, k, v: jax_flash.flash_attention(
            q, k, v, block_sizes=jax_flash.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)), q, kv, kv)
    assert "200" in str(refused.value) and "128" in str(refused.value)
    long = jnp.ones((1, 1, 256, 128))
    with pytest.raises(NotImplementedError, match="block_k=64 should be a multiple of 128"):
        jax.eval_shape(lambda q, k, v: jax_flash.flash_attention(
            q, k, v, block_sizes=jax_flash.BlockSizes(block_q=128, block_k_major=128, block_k=64, block_b=1)), long, long, long)


def test_pl_when_is_a_cond_in_the_kernels_jaxpr():
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...]

    call = pl.pallas_call(kernel, out_shape=S((8, 128), jnp.float32), grid=(1,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))], out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))
    (eqn,) = traced_program.pallas_call_eqns(jax.make_jaxpr(call)(jnp.ones((8, 128))))
    assert "cond" in kernel_primitives(eqn)


def test_the_sources_the_chapter_points_to_are_where_it_says():
    assert callable(jax_flash._flash_attention_kernel_single_batch)
    assert callable(jax_flash._flash_attention_bwd_dq) and callable(jax_flash._flash_attention_bwd_dkv)
    assert callable(jax_flash._verify_block)
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info  # noqa: F401


def _lse_row(block_q: int, q_len: int = 256):
    """A kernel writing one (1, block_q) block of a (1, q_len) f32 row per q block: the lane-dense lse."""
    def call(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = jnp.sum(x_ref[...], axis=1)[None, :]
        return pl.pallas_call(kernel, grid=(q_len // block_q,), in_specs=[pl.BlockSpec((block_q, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((1, block_q), lambda i: (0, i)),
                              out_shape=S((1, q_len), jnp.float32))(x)
    return call


def test_a_lane_dense_lse_block_needs_block_q_a_multiple_of_128_and_a_column_pads_to_128_lanes():
    from pytest_tpucourse.readers import mosaic, vmem_footprint

    from .reading import readme_prose

    x = S((256, 128), jnp.float32)
    with pytest.raises(ValueError, match="last two dimensions of your block shape are divisible by 8 and 128"):
        mosaic.lower_for_tpu(_lse_row(64), x)
    for block_q in (128, 256):  # a multiple of 128, and all of Sq
        mosaic.lower_for_tpu(_lse_row(block_q), x)
    column, full = (vmem_footprint.padded_bytes(shape, jnp.float32) for shape in ((512, 1), (512, 128)))
    assert column == full == 256 * 2 ** 10
    page = readme_prose("ch13")
    assert "(a (512, 1) f32 block takes 256 KiB, as much as (512, 128))" in page
    assert "`requires that the last two dimensions of your block shape are divisible by 8 and 128`" in page


def test_counted_on_the_matmuls_it_issues_the_backward_keeps_the_mxu_busier_than_the_forward():
    """Model FLOPs (the roofline's 2 forward and 5 backward matmuls) against FLOPs executed (the
    solution's 7 backward matmuls: tests above count them), from gate 03's non-causal rows."""
    from . import measured
    from .reading import readme_prose

    peak = measured.V5E.peak_flops
    page = readme_prose("ch13")
    found = {}
    for shape in ([2, 16, 4096, 128], [1, 8, 8192, 128]):
        b, h, s, d = shape
        one = 2 * b * h * s * s * d
        forward = round(measured.latest_us(3, "attention-fwd", shape)["kernel"], 1)
        both = round(measured.latest_us(3, "attention-fwd-bwd", shape)["kernel"], 1)
        backward = round(both - forward, 1)
        found[tuple(shape)] = (forward, backward, 2 * one / (forward * 1e-6) / peak,
                               5 * one / (backward * 1e-6) / peak, 7 * one / (backward * 1e-6) / peak)
        assert found[tuple(shape)][4] > found[tuple(shape)][2]  # executed: the backward busier than the forward
        assert found[tuple(shape)][3] < found[tuple(shape)][2]  # model: further from its floor
    (f1, b1, fwd1, model1, ran1), (f2, b2, fwd2, model2, ran2) = found.values()
    one = 2 * 2 * 16 * 4096 ** 2 * 128
    figures = [f"{one:,} FLOPs", f"{2 * one:,} FLOPs in {f1} µs", f"{2 * one / (f1 * 1e-6) / 1e12:.1f} TFLOP/s",
               f"{fwd1:.1%} of the peak ({fwd2:.1%} at 1×8×8192×128)", f"{f1 + b1} − {f1} = {b1} µs",
               f"{5 * one:,} FLOPs", f"{model1:.1%} of the peak", f"{7 * one:,} FLOPs", f"at {ran1:.1%}",
               f"({b2} µs) at {model2:.1%} and {ran2:.1%}"]
    assert [f for f in figures if f not in page] == []


def test_every_gate_03_speed_row_times_backward_pys_flash_attention():
    """The forward-only slots time the learner's forward through backward.py's custom_vjp function, so
    a rehearsal or a run on the chip needs it written for any speed row."""
    import inspect

    from .reading import graded_tests, readme_prose

    source = inspect.getsource(graded_tests("ch13", "test_gate03").test_flash_attention_speed)
    assert "impl.backward.flash_attention" in source and "impl.forward" not in source
    assert "every speed row times your `flash_attention` from backward.py" in readme_prose("ch13")


def test_the_gate_03_table_quotes_each_slots_latest_run():
    """The README's gate 03 table: per slot, its latest run's kernel, XLA and ceiling rows (one run_id,
    bench/records.jsonl), their ratios, and which ceiling that run was timed against (the searched one
    where the ceiling row's notes name the search's choice, the old four fixed sizes where they say so)."""
    import re

    from . import measured
    from .reading import readme_prose

    text = (measured.COURSE / "exercises" / "ch13" / "README.md").read_text(encoding="utf-8")
    choices = set()
    for problem, op in (("forward", "attention-fwd"), ("forward causal", "attention-causal-fwd"),
                        ("forward + backward", "attention-fwd-bwd"),
                        ("forward + backward causal", "attention-causal-fwd-bwd")):
        for shape in ([2, 16, 4096, 128], [1, 8, 8192, 128]):
            trio = measured.latest_run(3, op, shape)
            kernel, xla, jax_flash = (round(trio[which]["value"] * 1e6, 1) for which in ("kernel", "floor", "ceiling"))
            notes = trio["ceiling"]["notes"]
            chose = re.search(r"ceiling (\d+)x(\d+)/(\d+)(?:-bwd(\d+)x(\d+))? of JAX flash attention, the choice "
                              r"of a search", notes)
            assert chose or re.search(r"(tuned|swept 2026-12-06) over 4 block sizes", notes), notes
            ceiling = "searched" if chose else "old, 4 sizes"
            if chose:
                bq, bkv, sub, bwd_q, bwd_kv = chose.groups()
                choices.add((op, f"{bq} × {bkv} / {sub}" + (f", bwd {bwd_q} × {bwd_kv}" if bwd_q else "")))
            name = "×".join(str(n) for n in shape)
            row = (rf"\| {re.escape(problem)}, {name} \| {ceiling} \| {kernel} µs \| {xla} µs \| {kernel / xla:.3f} \| "
                   rf"{jax_flash} µs \| {kernel / jax_flash:.3f} \|")
            assert re.search(row, text), f"exercises/ch13/README.md has no row {op} {name}: {kernel}, {xla}, {jax_flash}"
    page = readme_prose("ch13")
    forwards = {("attention-fwd", "512 × 4096 / 1024"), ("attention-causal-fwd", "1024 × 1024 / 1024")}
    assert forwards <= choices and all(op.endswith("-bwd") for op, _ in choices - forwards)
    assert "512 × 4096 / 1024 for both non-causal forwards, 1024 × 1024 / 1024 for both causal ones" in page
    assert [c for op, c in choices - forwards if c not in page] == []
