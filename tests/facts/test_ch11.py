"""Chapter 11 (Pallas fundamentals): what Pallas, its two interpreters, the TPU lowering and libtpu do
with the chapter's kernels, read off the installed toolchain. docs/facts.md lists each claim."""

from __future__ import annotations

import collections
import contextlib
import io
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.core import jax_internals
from pytest_tpucourse.public_kernels import course_solution
from pytest_tpucourse.readers import blockspecs, hlo_text, mosaic

from .toolchain import compiler, for_this_jax, for_this_libtpu, interpreted, refusal, tpu_interpret

REPO = Path(__file__).resolve().parents[2]
S = jax.ShapeDtypeStruct


def test_a_kernel_gets_its_inputs_then_outputs_then_scratch_as_refs():
    seen = []

    def kernel(x_ref, y_ref, o_ref, scratch_ref):
        seen.extend((r.shape, str(r.dtype)) for r in (x_ref, y_ref, o_ref, scratch_ref))
        scratch_ref[...] = (x_ref[...] + y_ref[...]).astype(scratch_ref.dtype)
        o_ref[:, :128] = scratch_ref[...].astype(o_ref.dtype)

    call = pl.pallas_call(kernel, out_shape=S((8, 256), jnp.float32), grid=(1,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))] * 2,
                          out_specs=pl.BlockSpec((8, 256), lambda i: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.bfloat16)])
    jax.make_jaxpr(call)(jnp.zeros((8, 128)), jnp.zeros((8, 128)))
    assert seen == [((8, 128), "float32"), ((8, 128), "float32"), ((8, 256), "float32"), ((8, 128), "bfloat16")]


def unzeroed_row_sums(x):
    """The chapter's rowsum kernel without its `pl.when(j == 0)` init."""
    def kernel(x_ref, o_ref, acc_ref):
        acc_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)

        @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    return pl.pallas_call(kernel, out_shape=S((x.shape[0], 1), x.dtype), grid=(x.shape[0] // 8, x.shape[1] // 128),
                          in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((8, 1), lambda i, j: (i, 0)),
                          scratch_shapes=[pltpu.VMEM((8, 1), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")))(x)


@pytest.mark.parametrize("params", ["tpu", "generic"])
def test_a_scratch_buffer_starts_as_nan_under_either_interpreter(params):
    with interpreted(tpu_interpret() if params == "tpu" else True):
        assert np.isnan(np.asarray(unzeroed_row_sums(jnp.ones((16, 256), jnp.float32)))).all()


@pytest.mark.parametrize("array, block, dtype, legal", [
    ((1024, 1024), (256, 512), "float32", True),
    ((1, 512), (1, 128), "float32", True),
    ((1024, 1024), (4, 128), "float32", False),
    ((1024, 1024), (8, 64), "float32", False),
    ((1024, 1024), (16, 128), "bfloat16", True),
    ((1024, 1024), (8, 128), "bfloat16", True),
])
def test_the_tiling_rule_table(array, block, dtype, legal):
    assert (blockspecs.lowering_error(array, block, dtype) is None) == legal


def test_the_lowering_accepts_add_with_bf16_8_row_blocks():
    add = course_solution(REPO, "ch11.elementwise_add.add")
    x = S((64, 256), jnp.bfloat16)
    mosaic.lower_for_tpu(add, x, x, block_shape=(8, 128))


def int8_matmul(x, y):
    """x @ y for int8 operands in (8, 128) x blocks, accumulated in int32."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.int32)

    return pl.pallas_call(kernel, out_shape=S((x.shape[0], y.shape[1]), jnp.int32), grid=(x.shape[0] // 8,),
                          in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)),
                                    pl.BlockSpec(y.shape, lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((8, y.shape[1]), lambda i: (i, 0)))(x, y)


def test_the_v5e_compiler_on_int8_8_row_blocks_for_a_matmul():
    error = refusal(int8_matmul, S((256, 128), jnp.int8), S((128, 128), jnp.int8))
    assert (error and error.code) == for_this_libtpu({(0, 0, 42): "E2002", (0, 0, 50): None})


def copy_with(semantics):
    def call(x):
        spec = pl.BlockSpec((128, 128), lambda i, j: (i, j))
        return pl.pallas_call(lambda a, o: o.__setitem__(..., a[...] * 2), out_shape=S(x.shape, x.dtype), grid=(4, 4),
                              in_specs=[spec], out_specs=spec,
                              compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)
    return call


@pytest.mark.parametrize("semantics, split", [(("parallel", "parallel"), True), (("parallel", "arbitrary"), True),
                                              (("arbitrary", "arbitrary"), False)])
def test_a_parallel_axis_is_what_a_v5p_splits_between_its_two_cores(semantics, split):
    """Compiled for a v5p (megacore), a kernel with a "parallel" axis synchronises its two TensorCores
    (a `BarrierMegacore` check in its bundles); one whose axes are all "arbitrary" has none."""
    compile_for = compiler()
    x = S((512, 512), jnp.float32)
    assert ("BarrierMegacore" in compile_for(copy_with(semantics), x, chip="v5p", dumps=True).kernel().bundles_text) == split
    assert "BarrierMegacore" not in compile_for(copy_with(semantics), x, chip="v5e", dumps=True).kernel().bundles_text


def test_a_grid_floored_on_a_ragged_shape_leaves_the_last_rows_nan():
    def doubled(x):
        spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
        return pl.pallas_call(lambda a, o: o.__setitem__(..., a[...] * 2), out_shape=S(x.shape, x.dtype),
                              grid=(x.shape[0] // 16,), in_specs=[spec], out_specs=spec)(x)

    with interpreted(tpu_interpret()):
        out = np.asarray(doubled(jnp.ones((40, 128), jnp.float32)))
    assert (out[:32] == 2).all() and np.isnan(out[32:]).all()


def test_exp_overflows_f32_above_88_7():
    assert np.isfinite(np.asarray(jnp.exp(jnp.float32(88.7))))
    assert np.isinf(np.asarray(jnp.exp(jnp.float32(88.8))))


@pytest.mark.parametrize("rows, shared", [(3, 1), (2, 0)])
def test_two_simulated_cores_take_the_parallel_steps_in_two_contiguous_halves(rows, shared):
    """Grid (rows, 4), both axes "parallel", on two cores: each core takes half of the steps in loop
    order, so with an odd row count one row's four steps are split between the cores."""
    def copy(x):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        return pl.pallas_call(lambda a, o: o.__setitem__(..., a[...]), out_shape=S(x.shape, x.dtype), grid=(rows, 4),
                              in_specs=[spec], out_specs=spec,
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")))(x)

    points = []

    def record(token, coords, core):
        points.append((tuple(int(c) for c in coords), int(core)))
        return token

    with interpreted(tpu_interpret(num_cores_or_threads=2, grid_point_recorder=record)):
        jax.block_until_ready(copy(jnp.zeros((8 * rows, 512), jnp.float32)))
    assert sorted(p for p, _ in points) == [(i, j) for i in range(rows) for j in range(4)]
    cores_of_row = collections.defaultdict(set)
    for (i, _), core in points:
        cores_of_row[i].add(core)
    assert sum(len(cores) == 2 for cores in cores_of_row.values()) == shared


def test_the_race_detector_flags_a_reduction_axis_marked_parallel():
    def rowsums(x, semantics):
        def kernel(x_ref, o_ref):
            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

            o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)

        return pl.pallas_call(kernel, out_shape=S((x.shape[0], 1), x.dtype), grid=(1, 3),
                              in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                              out_specs=pl.BlockSpec((8, 1), lambda i, j: (i, 0)),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)

    x = jnp.ones((8, 384), jnp.float32)
    found = {}
    for semantics in (("parallel", "arbitrary"), ("parallel", "parallel")):
        printed = io.StringIO()
        try:  # jax 0.10.2 records a race; jax 0.12.0.1 raises `RuntimeError: RACE DETECTED` as well
            with interpreted(tpu_interpret(**tpu_rules.SETTINGS["races"])), contextlib.redirect_stdout(printed):
                jax.block_until_ready(rowsums(x, semantics))
                found[semantics[1]] = jax_internals.races_found()
        except Exception as error:
            found[semantics[1]] = "RACE DETECTED" in str(error)
    assert found == {"arbitrary": False, "parallel": True}


def test_debug_prints_the_kernel_jaxpr_and_its_mosaic_module():
    def debugged(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(lambda a, o: o.__setitem__(..., a[...] * 2), out_shape=S(x.shape, x.dtype), grid=(2,),
                              in_specs=[spec], out_specs=spec, debug=True)(x)

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        mosaic.lower_for_tpu(debugged, S((16, 128), jnp.float32))
    text = printed.getvalue()
    assert "The kernel jaxpr" in text and "The Mosaic module" in text and "func.func" in text


def test_xla_tpu_fuses_the_bias_and_the_gelu_into_the_matmul_xla_cpu_does_not():
    def unfused(x, w, b):
        return jax.nn.gelu(x @ w + b, approximate=True)

    args = S((512, 512), jnp.bfloat16), S((512, 512), jnp.bfloat16), S((512,), jnp.bfloat16)
    on_tpu = hlo_text.summary(hlo_text.parse(compiler()(unfused, *args).optimized_hlo))
    assert [(kind, root) for _, kind, root in on_tpu["fusions"]] == [("kOutput", "convert")]
    on_cpu = hlo_text.summary(hlo_text.parse(jax.jit(unfused).lower(*args).compile().as_text()))
    assert len(on_cpu["fusions"]) >= 2  # the dot's, and the elementwise epilogue's


def test_the_block_table_is_the_sweeps_and_1024_blocks_are_exactly_16_mib_before_the_product():
    """The README's table of the solution's schedule ("zeroed") is bench/tpu/matmul_sweep.log's; the
    blocks and accumulator at 1024 fill the v5e's 16 MiB default exactly, and the f32 product passes it."""
    import re

    from . import measured
    from .reading import readme_prose

    sweep = measured.matmul_sweep()
    rows = re.findall(r"^\| \((\d+), (\d+), (\d+)\) \| (\d+) \| ([\d.]+) µs \| ([\d.]+) \|$",
                      (measured.COURSE / "exercises" / "ch11" / "README.md").read_text(encoding="utf-8"), re.M)
    assert len(rows) == 4
    for bm, bk, bn, steps, time, ratio in rows:
        measured_us = sweep[f"zeroed {bm}x{bk}x{bn}"]
        assert (float(time), int(steps)) == (measured_us, (4096 // int(bm)) * (4096 // int(bk)) * (4096 // int(bn)))
        assert float(ratio) == round(measured_us / sweep["xla"], 2)
    bm = bk = bn = 1024
    blocks = 2 * (bm * bk + bk * bn + bm * bn) * 2 + 4 * bm * bn
    default = measured.V5E.scoped_vmem_bytes
    assert blocks == default == 16 * 2 ** 20 and blocks + 4 * bm * bn > default
    assert "exactly 16 MiB at 1024-blocks; the f32 product the MXU hands the accumulator, 4 MiB more" in readme_prose("ch11")


def _pallas_dot(body, x, y):
    """One kernel writing body(x, y) for whole (M, K) and (K, N) arrays, f32 out."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = body(x_ref[...], y_ref[...])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), jnp.float32))(x, y)


def _at(precision):
    return lambda a, b: jnp.dot(a, b, precision=precision, preferred_element_type=jnp.float32)


def test_jaxs_pallas_lowering_refuses_high_and_mosaic_a_bf16_dot_at_highest():
    """JAX 0.10.2's Pallas TPU lowering refuses HIGH; 0.11.2 and 0.12.0.1 lower it to bf16x3 (read off
    each JAX's lowering: the README says both). Mosaic refuses HIGHEST on bf16 operands on each."""
    import traceback

    f32 = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    page = " ".join((Path(__file__).resolve().parents[2] / "exercises" / "ch11" / "README.md").read_text().split())
    high = lambda x, y: _pallas_dot(_at(jax.lax.Precision.HIGH), x, y)  # noqa: E731
    if for_this_jax({"0.10.2": True, "0.11.2": False, "0.12.0.1": False}):
        with pytest.raises(NotImplementedError, match="^Unsupported dot precision: HIGH$") as refused:
            mosaic.lower_for_tpu(high, f32, f32)
        raised_in = traceback.extract_tb(refused.tb)[-1].filename
        assert raised_in.endswith(str(Path("jax", "_src", "pallas", "mosaic", "lowering.py"))), raised_in
    else:
        [kernel] = mosaic.kernels(high, f32, f32)
        assert "#tpu.contract_precision<bf16x3>" in kernel.text
    assert ("On JAX 0.10.2, JAX's Pallas TPU lowering refuses `HIGH` before any compiler sees the kernel "
            "(`NotImplementedError: Unsupported dot precision: HIGH`, raised in `jax/_src/pallas/mosaic/lowering.py`); "
            "JAX 0.11 and later lower it to Mosaic's `#tpu.contract_precision<bf16x3>`") in page
    bf16 = jax.ShapeDtypeStruct((128, 128), jnp.bfloat16)
    error = refusal(lambda x, y: _pallas_dot(_at(jax.lax.Precision.HIGHEST), x, y), bf16, bf16)
    # libtpu 0.0.42 says "Mosaic failed to compile TPU kernel: Bad lhs type", 0.0.50 names the module between
    assert error is not None and "Mosaic failed to compile TPU kernel" in str(error) and "Bad lhs type" in str(error)
    assert "(`Mosaic failed to compile TPU kernel: Bad lhs type`)" in page


def _dot_3pass():
    """bench/tpu_precision.py's dot_3pass, which the README shows as it is."""
    import inspect

    from .reading import readme_block
    from .toolchain import course_file

    split = course_file("bench/tpu_precision.py").dot_3pass
    assert readme_block("ch11", "def dot_3pass") == inspect.getsource(split)
    return split


def test_the_three_pass_product_errs_4_5e_6_against_float64_on_a_cpu():
    from .reading import readme_prose

    split = _dot_3pass()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    y = rng.standard_normal((1024, 256)).astype(np.float32)
    exact = x.astype(np.float64) @ y.astype(np.float64)
    with interpreted(tpu_interpret()):
        three = np.asarray(_pallas_dot(split, x, y), np.float64)
        one = np.asarray(_pallas_dot(lambda a, b: jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                                                          preferred_element_type=jnp.float32), x, y), np.float64)
    errors = [np.linalg.norm(out - exact) / np.linalg.norm(exact) for out in (three, one)]
    assert errors[0] < errors[1] / 100
    three, one = (f"{e:.1e}".replace("e-0", "e-") for e in errors)  # 4.5e-6, as the pages write it
    assert f"is {three}, against {one} for its first pass" in readme_prose("ch11")


def test_on_a_v5e_the_three_pass_product_is_24_vmatmul_against_96_at_highest():
    from .reading import readme_prose, v5e_kernel

    split = _dot_3pass()
    f32 = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    counts = [v5e_kernel(lambda x, y, body=body: _pallas_dot(body, x, y), f32, f32).mxu_ops
              for body in (split, _at(jax.lax.Precision.HIGHEST), _at(None))]
    assert counts == [24, 96, 16]
    assert "compiles for a v5e to 24 `vmatmul`, a quarter of `HIGHEST`'s 96" in readme_prose("ch11")
