"""Chapter 6 (Pallas): what the TPU lowering, the two interpreters and libtpu do with BlockSpecs,
pipelines and DMAs, read off the installed toolchain. docs/facts.md lists each claim with its test."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.public_kernels import course_solution, tiled_matmul
from pytest_tpucourse.compiler import block_verdict
from pytest_tpucourse.readers import blockspecs, mosaic
from pytest_tpucourse.run.mutants import load_mutants

from .toolchain import compiler, for_this_libtpu, interpreted, refusal, tpu_interpret

REPO = Path(__file__).resolve().parents[2]
S = jax.ShapeDtypeStruct
MiB = 2 ** 20


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def blocked_copy(x, block, grid, index_map):
    spec = pl.BlockSpec(block, index_map)
    return pl.pallas_call(copy_kernel, out_shape=S(x.shape, x.dtype), grid=grid, in_specs=[spec],
                          out_specs=spec)(x)


# ------------------------------------------------------------------ the block rule: the lowering


@pytest.mark.parametrize("shape, block, dtype, legal", [
    ((1024, 1024), (8, 64), "float32", False),  # 64 lanes
    ((1024, 1024), (4, 128), "float32", False),  # 4 sublanes
    ((3, 5, 7), (2, 5, 7), "float32", True),  # leading dimensions are free
    ((100, 384), (200, 128), "float32", True),  # larger than the array, a multiple of (8, 128)
    ((16, 128), (None, 128), "float32", False),  # None counts as 1
    ((1, 128), (None, 128), "float32", True),  # ... which is the whole dimension here
    ((4, 16, 128), (None, 16, 128), "float32", True),  # a squeezed leading dimension
    ((1024, 1024), (8, 128), "bfloat16", True),  # the same rule for every dtype
    ((1024, 1024), (8, 128), "int8", True),
    ((4096,), (384,), "float32", False),  # rank 1: a multiple of 128, still illegal
    ((384,), (384,), "float32", True),  # the whole array
    ((4096,), (3072,), "float32", True),  # a multiple of 1024
    ((4096,), (128,), "float32", True),  # a power of two >= 128 x packing
    ((4096,), (128,), "bfloat16", False),
    ((4096,), (256,), "bfloat16", True),
    ((4096,), (256,), "int8", False),
    ((4096,), (512,), "int8", True),
    ((), (), "float32", False),  # rank 0
])
def test_the_lowering_checks_the_last_two_block_dimensions_for_every_dtype(shape, block, dtype, legal):
    verdict = blockspecs.lowering_error(shape, block, dtype)
    assert (verdict is None) == legal, verdict


def test_the_lowering_names_the_rule_it_refuses():
    verdict = blockspecs.lowering_error((1024, 1024), (8, 64), "float32")
    assert ("The Pallas TPU lowering currently requires that the last two dimensions of your block shape "
            "are divisible by 8 and 128") in verdict


@pytest.mark.parametrize("params", ["tpu", "generic"])
def test_neither_interpreter_checks_the_block_rule(params):
    x = jnp.arange(16 * 256, dtype=jnp.float32).reshape(16, 256)
    with interpreted(tpu_interpret() if params == "tpu" else True):
        out = blocked_copy(x, (8, 64), (2, 4), lambda i, j: (i, j))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))  # an (8, 64) block the lowering refuses


# ------------------------------------------------------------------ the block rule: the compiler


@pytest.fixture(scope="module")
def copy_verdicts():
    """The v5e compiler's verdict on a one-block copy of a 1024 x 1024 array, per (block, dtype)."""
    compiler()
    blocks = [((8, 128), "bfloat16"), ((16, 128), "bfloat16"), ((8, 128), "int8"), ((16, 128), "int8"),
              ((32, 128), "int8"), ((128, 128), "bfloat16")]
    return {(block, dtype): block_verdict.compiler_verdict((1024, 1024), block, dtype) for block, dtype in blocks}


def test_the_compiler_decides_what_a_dtypes_tile_allows(copy_verdicts):
    compiles = {key for key, error in copy_verdicts.items() if error is None}
    assert compiles == for_this_libtpu({
        (0, 0, 42): {((8, 128), "bfloat16"), ((16, 128), "bfloat16"), ((32, 128), "int8"), ((128, 128), "bfloat16")},
        (0, 0, 50): set(copy_verdicts),  # int8 blocks of 8 and 16 rows re-tiled, not refused
    })
    for (block, dtype), error in copy_verdicts.items():
        if error is not None:
            assert (error.code, error.tiling) == ("E2002", (32, 128)), error.detail
            assert ("Operand of shape (..., 1024, 1024) has tiling (32, 128), but its block shape "
                    f"(..., {block[0]}, 128) is not divisible by tiling evenly nor matches the full shape") in error.detail


def test_a_pipelined_operand_takes_two_buffers_of_vmem():
    kernel = compiler()(blocked_copy, S((1000, 384), jnp.bfloat16), block=(128, 128), grid=(8, 3),
                        index_map=lambda i, j: (i, j), dumps=True).kernel()
    windows = {a.what: a.bytes for a in kernel.vmem_allocations if "window" in a.what}
    assert sorted(windows.values()) == [2 * 128 * 128 * 2] * 2, windows  # input and output, two buffers each
    assert all(what.endswith("x2") for what in windows), windows


@pytest.fixture(scope="module")
def matmul():
    return tiled_matmul  # chapter 11's matmul as it first writes it, the default scoped VMEM


def test_a_2048_f32_matmul_fits_16_mib_with_512_blocks_not_with_1024(matmul):
    x = S((2048, 2048), jnp.float32)
    assert refusal(matmul, x, x, bm=512, bk=512, bn=512) is None
    mosaic.lower_for_tpu(matmul, x, x, bm=1024, bk=1024, bn=1024)  # the lowering knows no VMEM limit
    error = refusal(matmul, x, x, bm=1024, bk=1024, bn=1024)
    assert (error.code, error.vmem_needed_bytes, error.vmem_limit_bytes) == ("E1001", 28 * MiB, 16 * MiB)
    assert "Scoped allocation with size 28.00M and limit 16.00M exceeded scoped vmem limit by 12.00M" in error.detail


def test_jax_gives_a_v5e_core_128_mib_of_vmem():
    info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion("v5e"), 1)
    assert info.vmem_capacity_bytes == 128 * MiB


# ------------------------------------------------------------------ the pipeline, as TPU interpret mode runs it


def test_the_grid_runs_last_axis_fastest():
    x = jnp.zeros((16, 384), jnp.float32)
    points = tpu_rules.recorded_grid_points(
        lambda x: blocked_copy(x, (8, 128), (2, 3), lambda i, j: (i, j)), x)
    assert [p for p, _ in points] == [(i, j) for i in range(2) for j in range(3)]


def test_an_input_block_whose_index_repeats_is_not_copied_again():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        x_ref[...] += 1  # a change to the VMEM buffer: seen next step only if nothing re-copied x

    def call(x):
        return pl.pallas_call(kernel, out_shape=S((8, 384), x.dtype), grid=(3,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (0, i)))(x)

    with interpreted(tpu_interpret()):
        out = np.asarray(call(jnp.zeros((8, 128), jnp.float32)))
    assert list(out[0, ::128]) == [0, 1, 2]


def test_an_output_block_is_never_read_back_from_hbm():
    """Even aliased to an input that holds zeros, the output block starts uninitialised."""
    def kernel(x_hbm, o_ref):
        o_ref[...] += 1

    def call(x):
        return pl.pallas_call(kernel, out_shape=S(x.shape, x.dtype), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec((8, 128), lambda: (0, 0)), input_output_aliases={0: 0})(x)

    with interpreted(tpu_interpret()):
        assert np.isnan(np.asarray(call(jnp.zeros((8, 128), jnp.float32)))).all()
    with interpreted(True):  # the generic interpreter keeps the whole output array: it reads the zeros
        assert (np.asarray(call(jnp.zeros((8, 128), jnp.float32))) == 1).all()


def k_first_matmul(x, y):
    """A matmul whose reduction axis is the grid's first: each output block is left and revisited."""
    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    return pl.pallas_call(
        kernel, out_shape=S((x.shape[0], y.shape[1]), jnp.float32), grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((32, 128), lambda k, i, j: (i, k)), pl.BlockSpec((128, 128), lambda k, i, j: (k, j))],
        out_specs=pl.BlockSpec((32, 128), lambda k, i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary", "arbitrary")))(x, y)


def test_tpu_interpret_mode_refuses_a_revisited_output_block_the_generic_interpreter_sums_it():
    x, y = jnp.ones((64, 256), jnp.float32), jnp.ones((256, 256), jnp.float32)
    with interpreted(tpu_interpret()), pytest.raises(Exception, match=r"Revisited block .* of output 0"):
        jax.block_until_ready(k_first_matmul(x, y))
    with interpreted(True):
        np.testing.assert_array_equal(np.asarray(k_first_matmul(x, y)), np.full((64, 256), 256.0))


@pytest.mark.parametrize("params", ["tpu", "generic"])
def test_a_ragged_block_reads_nan_padding_and_its_writes_are_masked(params):
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.broadcast_to(jnp.sum(x_ref[...], axis=0, keepdims=True), o_ref.shape)

    def call(x):
        return pl.pallas_call(kernel, out_shape=S((12, 128), jnp.float32), grid=(2,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

    with interpreted(tpu_interpret() if params == "tpu" else True):
        out = np.asarray(call(jnp.ones((12, 128), jnp.float32)))
    assert (out[:8] == 8).all()  # a whole block
    assert np.isnan(out[8:]).all()  # rows 12..15 of the last block were padding: NaN reached the sum
    assert out.shape == (12, 128)  # and nothing past row 12 was written


def test_scalar_prefetch_refs_come_first_in_the_kernel_and_in_every_index_map():
    seen = {}

    def kernel(idx_ref, row_ref, o_ref):
        seen["kernel"] = [type(r).__name__ for r in (idx_ref, row_ref, o_ref)]
        o_ref[...] = row_ref[...]

    def gather(table, idx):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(idx.shape[0],),
            in_specs=[pl.BlockSpec((None, 1, 128), lambda i, idx_ref: (idx_ref[i], 0, 0))],
            out_specs=pl.BlockSpec((None, 1, 128), lambda i, idx_ref: (i, 0, 0)))
        return pl.pallas_call(kernel, out_shape=S((idx.shape[0], 1, 128), table.dtype), grid_spec=grid_spec)(idx, table)

    table = jnp.arange(5 * 128, dtype=jnp.float32).reshape(5, 1, 128)
    with interpreted(tpu_interpret()):
        out = np.asarray(gather(table, jnp.array([3, 0, 3], jnp.int32)))
    assert list(out[:, 0, 0] / 128) == [3, 0, 3]
    assert len(seen["kernel"]) == 3


@pytest.mark.parametrize("params", ["tpu", "generic"])
def test_an_out_of_bounds_block_index(params):
    gather_rows = course_solution(REPO, "ch06.index_maps.gather_rows")
    table = jnp.arange(10 * 128, dtype=jnp.float32).reshape(10, 128)
    with interpreted(tpu_interpret() if params == "tpu" else True):
        last = np.asarray(gather_rows(table, jnp.array([-1], jnp.int32)))[0, 0] / 128
        assert last == 9  # a negative index wraps in both interpreters
        if params == "generic":
            assert np.asarray(gather_rows(table, jnp.array([10], jnp.int32)))[0, 0] / 128 == 9  # clamped
        else:
            with pytest.raises(Exception, match=re.escape('Out-of-bounds block index (10, 0, 0) for input')):
                jax.block_until_ready(gather_rows(table, jnp.array([10], jnp.int32)))


def test_bounds_checks_are_a_compiler_param_that_jax_passes_to_libtpu():
    from jax._src import tpu_custom_call
    from jax._src.pallas.mosaic import core as mosaic_core

    assert pltpu.CompilerParams().disable_bounds_checks is False
    assert "disable_bounds_checks: Disable bounds checks in the kernel." in inspect.getdoc(mosaic_core.CompilerParams)
    assert '"disable_bounds_checks": ' in inspect.getsource(tpu_custom_call)  # written into the kernel's config


def gather_with(table, idx, disable_bounds_checks):
    """gather_rows (solutions/ch06/index_maps.py) with the bounds-check flag set."""
    (v, d), (r,) = table.shape, idx.shape
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(r,),
        in_specs=[pl.BlockSpec((None, 1, d), lambda i, idx_ref: (idx_ref[i], 0, 0))],
        out_specs=pl.BlockSpec((None, 1, d), lambda i, idx_ref: (i, 0, 0)))
    params = pltpu.CompilerParams(dimension_semantics=("parallel",), disable_bounds_checks=disable_bounds_checks)
    return pl.pallas_call(lambda idx_ref, row_ref, o_ref: o_ref.__setitem__(..., row_ref[...]),
                          out_shape=S((r, 1, d), table.dtype), grid_spec=grid_spec,
                          compiler_params=params)(idx, table.reshape(v, 1, d)).reshape(r, d)


def checked_copies(bundles: str) -> list[str]:
    """The DMAs a kernel's bundles guard with a BoundsCheck (a `shalt.err`)."""
    return sorted(re.findall(r"shalt\.err .*?BoundsCheck \d+ \[deref of [^\]]+\] for (?:%\d+ = )?(dma\.\w+)", bundles))


def index_clamps(bundles: str, last_row: int) -> int:
    """Predicated moves of `last_row` into a register: min(index, last_row)."""
    return len(re.findall(rf"smov \(!%\w+, %\w+\), {last_row} ", bundles))


@pytest.mark.parametrize("rows", [37, 4096])
def test_what_the_v5e_compiler_checks_when_gather_rows_reads_the_table(rows):
    """A table XLA leaves in HBM is read by a DMA the default bounds check guards; a small one XLA
    copies to VMEM first, and its index is clamped to the last row, checks or not."""
    compile_for = compiler()
    args = S((rows, 128), jnp.float32), S((24,), jnp.int32)
    on, off = (compile_for(gather_with, *args, disable_bounds_checks=flag, dumps=True).kernel().bundles_text
               for flag in (False, True))
    assert checked_copies(off) == []
    where = "hbm" if rows == 4096 else "vmem"  # where XLA put the table before the kernel
    assert f"inlined_call_operand.{where} [shape: f32[{rows},1,128]" in on
    if rows == 4096:
        assert checked_copies(on) == ["dma.hbm_to_vmem", "dma.vmem_to_hbm"]
        assert index_clamps(on, rows - 1) == index_clamps(off, rows - 1) == 0
    else:
        assert checked_copies(on) == ["dma.vmem_to_hbm"]  # the output row's write-back only
        assert index_clamps(on, rows - 1) == index_clamps(off, rows - 1) == 1


def test_parallel_steps_run_in_a_shuffled_order_under_tpu_interpret_mode():
    def call(x):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        return pl.pallas_call(copy_kernel, out_shape=S(x.shape, x.dtype), grid=(8, 2), in_specs=[spec], out_specs=spec,
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")))(x)

    rows = [p[0] for p, _ in tpu_rules.recorded_grid_points(call, jnp.zeros((64, 256), jnp.float32))]
    assert sorted(set(rows)) == list(range(8)) and rows[::2] != list(range(8))  # every row block, not in order
    assert all(rows[2 * t] == rows[2 * t + 1] for t in range(8))  # the "arbitrary" axis still runs within each


def test_parallel_axes_must_lead_the_grid_in_tpu_interpret_mode_not_in_the_compiler():
    def call(x):
        spec = pl.BlockSpec((8, 128), lambda k, i: (i, k))
        return pl.pallas_call(copy_kernel, out_shape=S(x.shape, x.dtype), grid=(2, 2), in_specs=[spec], out_specs=spec,
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "parallel")))(x)

    with interpreted(tpu_interpret()), \
            pytest.raises(ValueError, match="Dimensions with parallel semantics must form a prefix of the grid."):
        call(jnp.zeros((16, 256), jnp.float32))
    assert refusal(call, S((16, 256), jnp.float32)) is None


# ------------------------------------------------------------------ DMAs by hand


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_a_dma_semaphore_counts_bytes_in_tpu_interpret_mode(mode):
    """Two copies of half a block into one semaphore, then one wait for a whole block's size: the
    wait takes both, and the semaphore ends at zero. Counted in copies, one would be left over."""
    def kernel(x_hbm, o_ref, buf, sem):
        for half in (0, 1):
            pltpu.make_async_copy(x_hbm.at[pl.ds(4 * half, 4)], buf.at[pl.ds(4 * half, 4)], sem.at[0]).start()
        pltpu.make_async_copy(x_hbm, buf, sem.at[0]).wait()  # a descriptor of 8 rows: 4096 bytes
        o_ref[...] = buf[...]

    call = pl.pallas_call(kernel, out_shape=S((8, 128), jnp.float32), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((1,))])
    printed = io.StringIO()
    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    with interpreted(tpu_interpret(dma_execution_mode=mode)), contextlib.redirect_stdout(printed):
        np.testing.assert_array_equal(np.asarray(call(x)), np.asarray(x))
    assert "non-zero count" not in printed.getvalue(), printed.getvalue()


@pytest.fixture(scope="module")
def column_sums_variants(tmp_path_factory):
    """solutions/ch06/double_buffering.py and two of its shipped DMA mistakes, as modules."""
    import importlib.util

    source = (REPO / "solutions/ch06/double_buffering.py").read_text()
    mutants = {m.name: m for m in load_mutants(REPO / "tests/mutants/ch06.toml")}
    folder = tmp_path_factory.mktemp("ch06-dma")
    variants = {}
    for name in ("solution", "copy_never_waited", "read_before_wait"):
        path = folder / f"double_buffering_{name}.py"
        path.write_text(source if name == "solution" else mutants[name].apply(source))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        variants[name] = module.column_sums
    return variants


@pytest.mark.parametrize("kernel, on_wait, eager", [
    ("solution", "right values", "right values"),
    ("copy_never_waited", "NaN", "right values, semaphore left counting"),
    ("read_before_wait", "NaN", "right values"),
])
def test_what_each_dma_execution_mode_shows(column_sums_variants, kernel, on_wait, eager):
    x = jnp.asarray(np.random.default_rng(0).standard_normal((24, 128)), jnp.float32)
    seen = {}
    for mode in ("on_wait", "eager"):
        printed = io.StringIO()
        with interpreted(tpu_interpret(dma_execution_mode=mode)), contextlib.redirect_stdout(printed):
            out = np.asarray(column_sums_variants[kernel](x, block_rows=8))
        right = np.allclose(out, np.asarray(x).sum(0), atol=1e-4)
        notes = ["NaN" if np.isnan(out).any() else "right values" if right else "wrong values"]
        if re.search(r"Semaphore .* has non-zero count .* at kernel exit", printed.getvalue()):
            notes.append("semaphore left counting")
        seen[mode] = ", ".join(notes)
    assert seen == {"on_wait": on_wait, "eager": eager}


# ------------------------------------------------------------------ deeper buffers and nested pipelines


def doubled(x, *, single_buffer=False):
    mode = dict(pipeline_mode=pl.Buffered(1)) if single_buffer else {}
    return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2), out_shape=S(x.shape, x.dtype),
                          grid=(x.shape[0] // 8,), in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0), **mode)],
                          out_specs=pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)))(x)


def test_the_lowering_takes_one_or_two_buffers_and_refuses_three():
    def triple(x):
        return pl.pallas_call(copy_kernel, out_shape=S(x.shape, x.dtype), grid=(8,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(3))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

    with pytest.raises(Exception, match=re.escape("Only single (1) and double (2) buffering are supported. Got 3.")):
        mosaic.lower_for_tpu(triple, S((64, 128), jnp.float32))


def test_an_input_buffered_once_takes_one_block_of_vmem():
    compile_for = compiler()
    x = S((64, 131072), jnp.float32)  # (8, 131072) f32 blocks: 4 MiB each
    assert compile_for(doubled, x, dumps=True).kernel().scoped_vmem_bytes == 16 * MiB
    assert compile_for(doubled, x, single_buffer=True, dumps=True).kernel().scoped_vmem_bytes == 12 * MiB


def nested_add(x, y, *, x_buffers=None):
    """x + y by an inner pipeline (pltpu.emit_pipeline) over arrays the pallas_call leaves in HBM."""
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    def kernel(x_hbm, y_hbm, o_hbm):
        mode = dict(pipeline_mode=pl.Buffered(x_buffers)) if x_buffers else {}
        pltpu.emit_pipeline(body, grid=(x.shape[0] // 8,),
                            in_specs=[pl.BlockSpec((8, 512), lambda i: (i, 0), **mode),
                                      pl.BlockSpec((8, 512), lambda i: (i, 0))],
                            out_specs=pl.BlockSpec((8, 512), lambda i: (i, 0)))(x_hbm, y_hbm, o_hbm)

    anywhere = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(kernel, out_shape=S(x.shape, x.dtype), in_specs=[anywhere, anywhere], out_specs=anywhere)(x, y)


@pytest.mark.parametrize("x_buffers, scoped_bytes", [(None, 98_304), (3, 114_688), (4, 131_072)])
def test_a_nested_pipeline_takes_deeper_buffers(x_buffers, scoped_bytes):
    x = S((64, 512), jnp.float32)
    kernel = compiler()(nested_add, x, x, x_buffers=x_buffers, dumps=True).kernel()
    assert kernel.scoped_vmem_bytes == scoped_bytes


def test_emit_pipeline_does_not_run_under_tpu_interpret_mode_on_a_cpu():
    x = jnp.ones((64, 512), jnp.float32)
    with interpreted(tpu_interpret()), pytest.raises(ValueError, match="Unsupported TPU device kind: cpu"):
        nested_add(x, x)


# ------------------------------------------------------------------ the generic interpreter


def test_the_generic_interpreter_poisons_uninitialised_floats_too():
    """It fills an output and a scratch buffer with NaN, as TPU interpret mode does (ints with their minimum)."""
    def kernel(x_ref, o_ref, acc_ref):
        acc_ref[...] += x_ref[...]  # never zeroed

        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[0:8, :] = acc_ref[...].astype(o_ref.dtype)  # rows 8.. of the output never written

    def call(x, dtype):
        return pl.pallas_call(kernel, out_shape=S((16, 128), dtype), grid=(1,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((8, 128), dtype)])(x)

    with interpreted(True):
        floats = np.asarray(call(jnp.ones((8, 128), jnp.float32), jnp.float32))
        ints = np.asarray(call(jnp.ones((8, 128), jnp.int32), jnp.int32))
    assert np.isnan(floats).all()
    assert (ints[8:] == np.iinfo(np.int32).min).all()


def test_the_sources_the_chapter_points_to_are_where_it_says():
    from jax._src.pallas.mosaic import lowering

    assert callable(lowering._check_block_mappings)
    interpret = Path(jax.__file__).parent / "_src/pallas/mosaic/interpret"
    assert {"interpret_pallas_call.py", "race_detection_state.py"} <= {p.name for p in interpret.iterdir()}
