"""Chapter 7 (Mosaic → LLO): what Pallas' TPU lowering emits and what libtpu decides about it (verdicts,
layouts, vregs, bundles, vmatmuls), read off the installed toolchain. docs/facts.md lists each claim."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

from pytest_tpucourse.checking.compiler_figures import vmatmuls
from pytest_tpucourse import public_kernels
from pytest_tpucourse.readers import mosaic

from .toolchain import compiler, course_file, for_this_libtpu, one_block

REPO = Path(__file__).resolve().parents[2]
S = jax.ShapeDtypeStruct


@pytest.fixture(scope="module")
def verdicts():
    return course_file("exercises/ch07/test_verdicts.py")


@pytest.fixture(scope="module")
def matmul():
    return public_kernels.tiled_matmul  # chapter 11's matmul as it first writes it


@pytest.fixture(scope="module")
def flash_forward():
    return public_kernels.plain_flash_forward  # chapter 13's forward as its README first writes it


# ------------------------------------------------------------------ the Mosaic module


def test_a_pallas_call_is_one_jaxpr_equation_and_one_tpu_custom_call(matmul):
    x = S((512, 512), jnp.bfloat16)
    jaxpr = jax.make_jaxpr(matmul)(x, x)
    assert [e.primitive.name for e in jaxpr.eqns if "pallas" in e.primitive.name] == ["pallas_call"]
    text = mosaic.lower_for_tpu(matmul, x, x).as_text()
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 1


def test_the_mosaic_module_of_the_ch11_matmul(matmul):
    x = S((512, 512), jnp.bfloat16)
    (kernel,) = mosaic.kernels(matmul, x, x)
    text = kernel.text
    signature = re.search(r"func\.func @matmul_kernel\(([^)]*)\)", text).group(1)
    assert re.findall(r"%arg\d+: (i32|memref<[^,]*)", signature) == (
        ["i32"] * 3 + ["memref<128x128xbf16"] * 3 + ["memref<128x128xf32"])
    attributes = kernel.kernel_attributes
    assert "iteration_bounds" in attributes and "array<i64: 4, 4, 4>" in attributes["iteration_bounds"]
    assert re.findall(r"dimension_semantics<(\w+)>", attributes["dimension_semantics"]) == [
        "parallel", "parallel", "arbitrary"]
    assert attributes["scalar_prefetch"].startswith("0") and attributes["scratch_operands"].startswith("1")
    assert attributes["window_params"].count("window_bounds = array<i64: 128, 128>") == 3
    assert attributes["window_params"].count("transform_indices = @transform_") == 3
    for op in ("arith.cmpi", "scf.if", "vector.broadcast", "tpu.vector_store", "vector.load", "tpu.matmul",
               "arith.addf"):
        assert kernel.op_counts.get(op), op
    assert "vector.contract" not in text  # dot_general is lowered straight to Mosaic's own op
    assert re.search(r"tpu\.matmul .*: vector<128x128xbf16>, vector<128x128xbf16>, vector<128x128xf32> "
                     r"-> vector<128x128xf32>", text)
    assert re.search(r"func\.func @transform_0\(%arg0: i32, %arg1: i32, %arg2: i32\) -> \(i32, i32\) \{\s*"
                     r"(?:%\S+ = arith\.constant .*\n\s*)*return %arg0, %arg2 : i32, i32", text)


def test_the_mosaic_module_of_the_ch13_causal_forward(flash_forward):
    q = S((1, 2, 512, 128), jnp.bfloat16)
    (kernel,) = mosaic.kernels(flash_forward, q, q, q, causal=True)
    counts = kernel.op_counts
    assert (counts["tpu.matmul"], counts["math.exp"], counts["vector.multi_reduction"], counts["scf.if"]) == (2, 2, 2, 3)
    assert "window_bounds = array<i64: 1, 1, 128, 128>" in kernel.kernel_attributes["window_params"]


def test_the_mosaic_module_of_jax_paged_attention():
    q = S((2, 8, 128), jnp.bfloat16)
    pages = S((2, 64, 16, 128), jnp.bfloat16)
    lengths, indices = S((2,), jnp.int32), S((2, 16), jnp.int32)
    (kernel,) = mosaic.kernels(lambda *a: paged_attention(*a, pages_per_compute_block=4), q, pages, pages, lengths, indices)
    windows = kernel.kernel_attributes["window_params"]
    assert windows.count("{}") == 2  # k and v pages left in HBM (pl.ANY): no window
    assert kernel.kernel_attributes["scalar_prefetch"].startswith("4")
    assert '"tpu.trace_start"()' in kernel.text  # an op without custom syntax, in MLIR's generic form


def test_libtpu_runs_mosaics_passes_in_the_order_the_chapter_draws(matmul):
    """The compiler's pass dumps (--xla_mosaic_dump_to), read from a compile of its own: a kept
    result holds only the dumps the course reads."""
    from pytest_tpucourse.compiler import libtpu

    compile_for = compiler()
    x = S((256, 256), jnp.bfloat16)
    kept = libtpu.keep_results_in(None)
    try:
        result = compile_for(matmul, x, x, dumps=True)
    finally:
        libtpu.keep_results_in(kept)
    passes = [re.search(r"-mosaic-dump-\w+-post-([\w-]+)\.txt$", p.name).group(1)
              for p in sorted((result.dump_dir / "mosaic").iterdir()) if "-post-" in p.name]
    order = [passes.index(name) for name in ("infer-memref-layout", "canonicalize-mosaic", "infer-vector-layout",
                                             "apply-vector-layout", "lower-to-llo")]
    assert order == sorted(order), passes
    assert any(p.name.endswith("final_bundles.txt") for p in (result.dump_dir / "llo").iterdir())


# ------------------------------------------------------------------ layouts and vregs


def test_ch13s_m_and_l_take_16_vregs_and_64_kib_of_vmem_each(flash_forward):
    q = S((1, 2, 512, 128), jnp.bfloat16)
    kernel = compiler()(flash_forward, q, q, q, causal=True, dumps=True).kernel()
    columns = collections.Counter(v.vregs for v in kernel.values
                                  if v.shape == (128, 1) and v.dtype == "f32" and v.layout.offsets == (0, 0)
                                  and v.layout.tiling == (8, 128) and v.layout.bitwidth == 32)
    assert columns == {16: 18}
    scratch = [(a.shape, a.bytes, a.padding) for a in kernel.vmem_allocations if a.what == "scratch operand"]
    assert scratch.count(("f32[128,1]", 65536, 65024)) == 2


def test_jax_flash_attention_keeps_m_and_l_128_lanes_wide():
    from jax.experimental.pallas.ops.tpu import flash_attention as jax_flash

    q = S((1, 2, 512, 128), jnp.float32)
    forward = mosaic.kernels(lambda q, k, v: jax_flash.flash_attention(q, k, v, causal=True), q, q, q)[0]
    arguments = re.findall(r"%arg\d+: (i32|memref<[^,]*)", re.search(r"func\.func @\w+\(([^)]*)\)", forward.text).group(1))
    scratch = arguments[-int(forward.kernel_attributes["scratch_operands"].split()[0]):]
    assert scratch == ["memref<1x1x128x128xf32"] * 3  # m and l (block_q, 128), and the (block_q, D) accumulator


def test_ch11s_bf16_blocks_load_in_8_row_tiles_and_are_relaid_to_16_for_the_matmul(matmul):
    x = S((1024, 1024), jnp.bfloat16)
    kernel = compiler()(matmul, x, x, bm=256, bk=256, bn=256, dumps=True).kernel()
    bf16 = {(v.layout.tiling, v.vregs) for v in kernel.values if v.shape == (256, 256) and v.dtype == "bf16"
            and v.layout.offsets == (0, 0)}
    assert bf16 == {((8, 128), 32), ((16, 128), 32)}


# ------------------------------------------------------------------ the verdicts


CATALOGUE_VERDICTS = {  # the README's table: (0.0.42, 0.0.50)
    ("copy", (64, 256), "float32", (8, 128), "v5e"): ("ok", "ok"),
    ("copy", (64, 256), "float32", (4, 128), "v5e"): ("block shape", "block shape"),
    ("copy", (60, 200), "float32", (60, 200), "v5e"): ("ok", "ok"),
    ("copy", (64, 256), "bfloat16", (8, 128), "v5e"): ("ok", "ok"),
    ("copy", (64, 256), "int8", (8, 128), "v5e"): ("tiling", "ok"),
    ("copy", (40, 256), "int8", (8, 128), "v5e"): ("ok", "ok"),
    ("copy", (64, 256), "int8", (32, 128), "v5e"): ("ok", "ok"),
    ("double", (64, 256), "int8", (32, 128), "v5e"): ("mosaic", "mosaic"),
    ("double", (64, 256), "int32", (8, 128), "v5e"): ("ok", "ok"),
    ("cumsum", (64, 256), "float32", (8, 128), "v5e"): ("unsupported op", "unsupported op"),
    ("matmul", (64, 128), "bfloat16", (16, 128), "v5e"): ("unsupported op", "unsupported op"),
    ("matmul", (64, 128), "float32", (8, 128), "v5e"): ("ok", "ok"),
    ("split_lanes", (64, 128), "float32", (8, 128), "v5e"): ("mosaic", "ok"),
    ("double", (4096, 1024), "float32", (2048, 1024), "v5e"): ("vmem", "vmem"),
    ("double", (4096, 1024), "float32", (2048, 1024), "v6e"): ("ok", "ok"),
}


# The kernels the graded tests judge beside the table (the exercise's section names them): int8 blocks
# off the (32, 128) tiling in bodies the lowering refuses first, and an int32 matmul that lowers.
MORE_GRADED = {
    ("cumsum", (64, 256), "int8", (8, 128), "v5e"): ("unsupported op", "unsupported op"),
    ("matmul", (64, 128), "int8", (8, 128), "v5e"): ("unsupported op", "unsupported op"),
    ("matmul", (64, 128), "int32", (8, 128), "v5e"): ("mosaic", "mosaic"),
}


def test_the_catalogue_lists_the_graded_kernels(verdicts):
    """The graded tests judge the table's kernels with the table's columns, and the three more."""
    assert dict(verdicts.CATALOGUE) == {**CATALOGUE_VERDICTS, **MORE_GRADED}


@pytest.mark.parametrize("entry", list(CATALOGUE_VERDICTS), ids=lambda e: f"{e[0]}-{e[2]}-{e[3][0]}x{e[3][1]}-{e[4]}")
def test_the_verdict_catalogue(verdicts, entry):
    compiler()
    verdict, words = verdicts.toolchain_verdict(*entry, compile=True)
    old, new = CATALOGUE_VERDICTS[entry]
    assert verdict == for_this_libtpu({(0, 0, 42): old, (0, 0, 50): new}), words


@pytest.mark.parametrize("body, shape, dtype, block, words", [
    ("cumsum", (64, 256), "float32", (8, 128), "Unimplemented primitive in Pallas TPU lowering for tc: cumsum"),
    ("matmul", (64, 128), "bfloat16", (16, 128), "'tpu.matmul' op Expected matmul acc to be 32-bit"),
])
def test_what_the_lowering_says_when_it_refuses_an_op(verdicts, body, shape, dtype, block, words):
    fn = verdicts.catalogue_kernel(body, shape, block)
    with pytest.raises(Exception) as refused:
        mosaic.lower_for_tpu(fn, S(shape, jnp.dtype(dtype)))
    assert words in str(refused.value)
    if body == "matmul":
        assert type(refused.value).__name__ == "VerificationError"
        assert "Pallas encountered an internal verification error" in str(refused.value)


def compile_error(fn, *args, **kwargs):
    from pytest_tpucourse.compiler import libtpu

    try:
        compiler()(fn, *args, **kwargs)
    except libtpu.TpuCompileError as error:
        return error
    return None


def test_what_the_compiler_says_when_it_refuses(verdicts):
    int8 = compile_error(verdicts.catalogue_kernel("copy", (64, 256), (8, 128)), S((64, 256), jnp.int8))
    if for_this_libtpu({(0, 0, 42): True, (0, 0, 50): False}):
        assert int8.code == "E2002" and ("Operand of shape (..., 64, 256) has tiling (32, 128), but its block shape "
                                         "(..., 8, 128) is not divisible by tiling evenly nor matches the full shape") in int8.detail
    else:
        assert int8 is None
    arithmetic = compile_error(verdicts.catalogue_kernel("double", (64, 256), (32, 128)), S((64, 256), jnp.int8))
    assert "Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'" in arithmetic.detail
    cast = compile_error(verdicts.catalogue_kernel("split_lanes", (64, 128), (8, 128)), S((64, 128), jnp.float32))
    if for_this_libtpu({(0, 0, 42): True, (0, 0, 50): False}):
        assert "infer-vector-layout" in cast.detail and "unsupported shape cast" in cast.detail
    else:
        assert cast is None
    assert compile_error(verdicts.catalogue_kernel("split_lanes", (64, 512), (8, 512)), S((64, 512), jnp.float32)) is None
    vmem = compile_error(verdicts.catalogue_kernel("double", (4096, 1024), (2048, 1024)), S((4096, 1024), jnp.float32))
    assert vmem.code == "E1001" and "Scoped allocation with size 32.00M and limit 16.00M" in vmem.detail


@pytest.mark.parametrize("shape, dtype, block, compiles", [
    ((32, 256), "int8", (8, 128), {(0, 0, 42): False, (0, 0, 50): True}),
    ((32, 256), "int8", (16, 128), {(0, 0, 42): False, (0, 0, 50): True}),
    ((48, 256), "int8", (16, 128), {(0, 0, 42): True, (0, 0, 50): True}),
    ((16, 256), "bfloat16", (8, 128), {(0, 0, 42): True, (0, 0, 50): True}),
    ((24, 256), "bfloat16", (8, 128), {(0, 0, 42): True, (0, 0, 50): True}),
    ((1024, 256), "bfloat16", (8, 128), {(0, 0, 42): True, (0, 0, 50): True}),
])
def test_which_arrays_take_blocks_of_part_of_a_native_tile(verdicts, shape, dtype, block, compiles):
    error = compile_error(verdicts.catalogue_kernel("copy", shape, block), S(shape, jnp.dtype(dtype)))
    assert (error is None) == for_this_libtpu(compiles), error and error.detail


# ------------------------------------------------------------------ bundles and the MXU


@pytest.mark.parametrize("chip, blocks, bundles, per_unit", [
    ("v5e", 128, {(0, 0, 42): (210, 180), (0, 0, 50): (212, 182)}, {"mxu0": 2, "mxu1": 2, "mxu2": 2, "mxu3": 2}),
    ("v5e", 256, {(0, 0, 42): (549, 518), (0, 0, 50): (555, 524)}, {"mxu0": 16, "mxu1": 16, "mxu2": 16, "mxu3": 16}),
    ("v6e", 128, {(0, 0, 42): (212, 179), (0, 0, 50): (215, 181)}, {"mxu0": 2, "mxu1": 2}),
    ("v6e", 256, {(0, 0, 42): (342, 306), (0, 0, 50): (343, 309)}, {"mxu0": 8, "mxu1": 8}),
])
def test_the_bundles_and_vmatmuls_of_the_ch11_matmul(matmul, chip, blocks, bundles, per_unit):
    x = S((1024, 1024), jnp.bfloat16)
    kernel = compiler()(matmul, x, x, chip=chip, bm=blocks, bk=blocks, bn=blocks, dumps=True).kernel()
    assert (kernel.bundles, kernel.step_bundles) == for_this_libtpu(bundles)
    assert kernel.step_mxu_ops == sum(per_unit.values()) and kernel.mxu_ops_by_unit == per_unit


def test_a_256_wide_mxu_pairs_row_groups_only_in_pairs(matmul):
    compile_for = compiler()
    x = S((512, 512), jnp.bfloat16)
    assert compile_for(matmul, x, x, chip="v6e", bm=16, bk=128, bn=128, dumps=True).kernel().step_mxu_ops == 1
    assert [vmatmuls(m, 128, 128, chip="v6e") for m in (48, 96)] == [3, 3]


def test_a_bf16_push_takes_16_rows_and_8_rows_cost_a_whole_one():
    compiler()
    assert [vmatmuls(m, 128, 128, chip="v5e") for m in (8, 16, 24)] == [1, 1, 2]


def cross_lane_work(bundles: str) -> collections.Counter:
    """(instruction, unit) of every instruction a kernel issues on a cross-lane unit (`xlu0`, ...)."""
    return collections.Counter(re.findall(r"\b(v\w+)\.[\w.]*?\b(xlu\d)\b", bundles))


@pytest.mark.parametrize("chip, units", [("v5e", 3), ("v6e", 2)])
def test_transposes_and_lane_reductions_go_through_the_cross_lane_units(chip, units):
    compile_for = compiler()
    x = S((128, 128), jnp.float32)

    def bundles(body):
        return compile_for(one_block(body), x, chip=chip, dumps=True).kernel().bundles_text

    transpose = cross_lane_work(bundles(lambda a: a.T))
    assert transpose == {("vxpose", "xlu0"): 16, ("vpop", "xlu0"): 16}
    lanes = cross_lane_work(bundles(lambda a: jnp.sum(a, axis=1, keepdims=True) + jnp.zeros_like(a)))
    assert sum(n for (op, _), n in lanes.items() if op == "vadd") == 16 == sum(n for (op, _), n in lanes.items() if op == "vpop")
    assert len({unit for _, unit in lanes}) == units
    sublanes = bundles(lambda a: jnp.sum(a, axis=0, keepdims=True) + jnp.zeros_like(a))
    assert cross_lane_work(sublanes) == {} and len(re.findall(r"\bvrot", sublanes)) == 3


# ------------------------------------------------------------------ register spills


def test_the_bundles_name_64_vector_registers(matmul):
    """A value's register is the suffix of its name in the bundles (`%v7875_v0`: v0)."""
    x = S((4096, 4096), jnp.bfloat16)
    kernel = compiler()(matmul, x, x, bm=512, bk=512, bn=512, dumps=True).kernel()
    registers = {int(r) for r in re.findall(r"%v\d+_v(\d+)\b", kernel.bundles_text)}
    assert registers == set(range(64)), sorted(registers)


@pytest.mark.parametrize("blocks, spilled", [(128, 0), (256, 0), (512, 356_352)])
def test_ch11s_matmul_spills_registers_at_gate_01s_blocks_only(matmul, blocks, spilled):
    """The VMEM report's spill area (its SPILL allocation) for ch11's bf16 matmul on 4096² at equal
    blocks: what `tpucourse compile` prints as `register spills: ... bytes`."""
    x = S((4096, 4096), jnp.bfloat16)
    kernel = compiler()(matmul, x, x, bm=blocks, bk=blocks, bn=blocks, dumps=True).kernel()
    spills = sum(a.bytes for a in kernel.vmem_allocations if a.what == "SPILL")
    assert spills == for_this_libtpu({(0, 0, 42): spilled, (0, 0, 50): spilled}), kernel.vmem_allocations
    # The scoped VMEM: three double-buffered bf16 windows and the f32 scratch, a block's 4 bytes per
    # element each (4.00 MiB at 512 blocks), and the spill area.
    assert kernel.scoped_vmem_bytes == 4 * blocks * blocks * 4 + spills
