"""Chapter 8 (TPU chip): JAX's chip table and what libtpu's VMEM accounting and code for the MXU, VPU and
EUP show, read off the installed toolchain. docs/facts.md lists each claim beside its test."""

from __future__ import annotations

import collections
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import chips
from pytest_tpucourse.checking.compiler_figures import matmul_schedule, one_block_matmul, vmatmuls
from pytest_tpucourse.readers import vmem_footprint

from .toolchain import compiler, course_file, for_this_libtpu, one_block, refusal

S = jax.ShapeDtypeStruct
MiB, KiB = 2 ** 20, 2 ** 10

# The README's table: VMEM per TensorCore, MXUs, MXU width, bf16 FLOP/s and HBM B/s per chip, and
# the TensorCores per chip the course multiplies JAX's per-core figures by.
TABLE = {
    "v2": (16 * MiB, 1, 128, 4.6e13, 7.16e11, 2),
    "v3": (16 * MiB, 2, 128, 1.4e14, 8.25e11, 2),
    "v4": (16 * MiB, 4, 128, 2.75e14, 1.23e12, 2),
    "v5e": (128 * MiB, 4, 128, 1.97e14, 8.2e11, 1),
    "v5p": (64 * MiB, 4, 128, 4.59e14, 2.46e12, 2),
    "v6e": (128 * MiB, 2, 256, 9.2e14, 1.64e12, 1),
    "v7x": (64 * MiB, 2, 256, 2.31e15, 7.4e12, 2),
}


@pytest.mark.parametrize("chip", list(TABLE))
def test_the_registry_is_jaxs_table_times_the_cores(chip):
    vmem, mxus, width, flops, bandwidth, cores = TABLE[chip]
    core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(chips.get_chip(chip).jax_version), 1)
    assert (core.vmem_capacity_bytes, core.num_mxus, core.mxu_column_size) == (vmem, mxus, width)
    assert (core.bf16_ops_per_second * cores, core.mem_bw_bytes_per_second * cores) == pytest.approx((flops, bandwidth))
    registered = chips.get_chip(chip)
    assert (registered.peak_flops, registered.hbm_bandwidth) == pytest.approx((flops, bandwidth))


# ------------------------------------------------------------------ the VPU and the EUP


def instructions(bundles: str) -> collections.Counter:
    """Vector instructions of a kernel's final bundles, by mnemonic (`vadd`, `vpow2`, `vpop`, ...)."""
    return collections.Counter(re.findall(r"= (v[a-z0-9]+)(?:\.[\w.]+)?\b", bundles))


def flash_tile(q, k, v):
    """One flash-attention tile: s = q kᵀ, p = exp(s - rowmax), p v."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    p = jnp.exp(s - s.max(axis=1, keepdims=True))
    return jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)


EUP_EXP = {(0, 0, 42): "vpow2", (0, 0, 50): "vexp2"}  # what the EUP's 2^x is called


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_elementwise_work_is_one_vpu_instruction_per_vreg(chip):
    x = S((128, 128), jnp.float32)
    add = compiler()(one_block(lambda a, b: a + b), x, x, chip=chip, dumps=True).kernel()
    assert instructions(add.bundles_text)["vadd"] == 16


@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_exp_is_a_vmul_an_eup_instruction_and_a_pop_per_vreg(chip):
    kernel = compiler()(one_block(jnp.exp), S((128, 128), jnp.float32), chip=chip, dumps=True).kernel()
    seen = instructions(kernel.bundles_text)
    assert (seen["vmul"], seen[for_this_libtpu(EUP_EXP)], seen["vpop"]) == (16, 16, 16)


@pytest.mark.parametrize("chip, pushes", [("v5e", 16), ("v6e", 8)])
def test_a_flash_tile_needs_as_many_exponentials_on_either_mxu(chip, pushes):
    tile = S((128, 128), jnp.bfloat16)
    kernel = compiler()(one_block(flash_tile, jnp.float32), tile, tile, tile, chip=chip, dumps=True).kernel()
    assert (kernel.mxu_ops, instructions(kernel.bundles_text)[for_this_libtpu(EUP_EXP)]) == (pushes, 16)


# ------------------------------------------------------------------ VMEM: what a kernel keeps on chip


def windows(block, *, limit=None, copy=False, x_once=False, y_fixed=False):
    """x + y (or a copy of x) over a row of `block`s, with the compiler's scoped limit at `limit`."""
    def call(x, y):
        spec = pl.BlockSpec(block, lambda j: (0, j))
        x_spec = pl.BlockSpec(block, lambda j: (0, j), **(dict(pipeline_mode=pl.Buffered(1)) if x_once else {}))
        y_spec = pl.BlockSpec(block, lambda j: (0, 0)) if y_fixed else spec
        body = (lambda a, b, o: o.__setitem__(..., a[...])) if copy else (lambda a, b, o: o.__setitem__(..., a[...] + b[...]))
        return pl.pallas_call(body, out_shape=S(x.shape, x.dtype), grid=(x.shape[1] // block[1],),
                              in_specs=[x_spec, y_spec], out_specs=spec,
                              compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x, y)
    return call


INTERNAL_SCRATCH = 72 * 128 * 4  # u32[72, 128]: the compiler's own, for bf16 arithmetic on blocks under 8 rows


@pytest.mark.parametrize("rows, dtype, options, extra", [
    (1, "float32", {}, 0),  # 1 row stays 1
    (3, "float32", {}, 0),  # 3 rows -> 4
    (12, "float32", {}, 0),  # 12 -> 16
    (8, "bfloat16", {}, 0),  # 8 bf16 rows stay 8 (not the 16 of a bf16 vreg)
    (1, "bfloat16", {}, 0),  # 1 -> 2: bf16 packs two rows in a sublane (and no internal scratch here)
    (1, "int8", dict(copy=True), 0),  # 1 -> 4
    (8, "float32", dict(x_once=True), 0),  # x Buffered(1): one buffer
    (8, "float32", dict(y_fixed=True), 0),  # y's index never changes: one buffer
    (2, "bfloat16", {}, INTERNAL_SCRATCH),
    (3, "bfloat16", {}, INTERNAL_SCRATCH),
    (2, "bfloat16", dict(copy=True), 0),  # a copy of small bf16 blocks: no internal scratch
])
def test_vmem_padding_as_the_compiler_counts_it(rows, dtype, options, extra):
    """The README's rules, read at lanes of 8192 with the scoped limit lowered to 40 KiB (above the
    compiler's internal scratch, below every kernel's need): its E1001 names the bytes needed."""
    block = (rows, 8192)
    args = [S((rows, 2 * 8192), jnp.dtype(dtype))] * 2
    error = refusal(windows(block, limit=40 * KiB, **options), *args)
    (buffers,) = vmem_footprint.kernel_buffers(jax.make_jaxpr(windows(block, **options))(*args))
    assert (error.code, error.vmem_needed_bytes) == ("E1001", vmem_footprint.footprint_bytes(buffers) + extra)


def test_the_compilers_internal_scratch_is_named_in_its_vmem_report():
    args = [S((2, 2048), jnp.bfloat16)] * 2
    compile_for = compiler()
    add = compile_for(windows((2, 1024)), *args, dumps=True).kernel()
    copy = compile_for(windows((2, 1024), copy=True), *args, dumps=True).kernel()
    assert [(a.what, a.shape, a.bytes) for a in add.vmem_allocations if "window" not in a.what] == [
        ("internal scratch", "u32[72,128]", INTERNAL_SCRATCH)]
    assert [a for a in copy.vmem_allocations if "window" not in a.what] == []


def test_the_compiler_allocates_whole_kib():
    def copy(x):
        spec = pl.BlockSpec(x.shape, lambda: (0, 0))
        return pl.pallas_call(lambda a, o: o.__setitem__(..., a[...]), out_shape=S(x.shape, x.dtype),
                              in_specs=[spec], out_specs=spec)(x)

    kernel = compiler()(copy, S((1, 128), jnp.float32), dumps=True).kernel()  # one f32 row: 512 bytes
    assert [a.bytes for a in kernel.vmem_allocations] == [1024, 1024]


def test_xla_may_place_a_small_operand_in_vmem_and_the_kernel_gets_no_window_for_it():
    graded = course_file("exercises/ch08/test_vmem.py")
    args = [S((3, 80, 384), jnp.bfloat16), S((384, 200), jnp.bfloat16)]
    result = compiler()(graded._batched_matmul(None, 40, 0, 0, weights_once=True), *args, dumps=True)
    assert [a.what for a in result.kernel().vmem_allocations if "input" in a.what] == []
    assert re.search(r"copy-start = \(bf16\[3,80,384\]\{[^}]*S\(1\)\}", result.optimized_hlo)


def test_the_int8_batched_matmul_accumulating_in_f32_does_not_compile():
    graded = course_file("exercises/ch08/test_vmem.py")
    args = [S((3, 80, 384), jnp.int8), S((384, 200), jnp.int8)]
    error = refusal(graded._batched_matmul(None, 40, 0, 0, weights_once=True), *args)
    assert "float acc with int lhs. Expected float lhs." in error.detail


@pytest.mark.parametrize("chip, limit", [("v4", None), ("v5e", 16), ("v5p", 16), ("v6e", 32), ("v7x", 32)])
def test_each_chips_default_scoped_vmem_limit(chip, limit):
    """48 MiB of windows (8 MiB f32 blocks, three operands, two buffers; the body touches one tile)."""
    def big_windows(x, y):
        spec = pl.BlockSpec((8, 262144), lambda j: (0, j))

        def kernel(x_ref, y_ref, o_ref):
            o_ref[:, 0:128] = x_ref[:, 0:128] + y_ref[:, 0:128]

        return pl.pallas_call(kernel, out_shape=S(x.shape, x.dtype), grid=(x.shape[1] // 262144,),
                              in_specs=[spec, spec], out_specs=spec)(x, y)

    x = S((8, 1048576), jnp.float32)
    error = refusal(big_windows, x, x, chip=chip)
    assert error.vmem_needed_bytes == 48 * MiB
    if limit is None:  # v4: no scoped limit below its whole 16 MiB
        assert error.code is None and "Used 48.00M of 16.00M vmem" in error.detail
    else:
        assert (error.code, error.vmem_limit_bytes) == ("E1001", limit * MiB)


def test_vmem_limit_bytes_moves_the_limit():
    """24 MiB of windows (4 MiB f32 blocks; the body touches one tile): refused under v5e's default
    16 MiB, compiled with vmem_limit_bytes=32 MiB (the README's 28 MiB matmul is the same case, and a
    slower compile)."""
    def windows_of(limit):
        def call(x, y):
            spec = pl.BlockSpec((8, 131072), lambda j: (0, j))

            def kernel(x_ref, y_ref, o_ref):
                o_ref[:, 0:128] = x_ref[:, 0:128] + y_ref[:, 0:128]

            return pl.pallas_call(kernel, out_shape=S(x.shape, x.dtype), grid=(x.shape[1] // 131072,),
                                  in_specs=[spec, spec], out_specs=spec,
                                  compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x, y)
        return call

    x = S((8, 262144), jnp.float32)
    assert refusal(windows_of(None), x, x).vmem_needed_bytes == 24 * MiB
    assert refusal(windows_of(32 * MiB), x, x) is None


@pytest.mark.parametrize("chip", ["v4", "v5e", "v5p", "v6e", "v7x"])
def test_a_kernel_that_needs_exactly_its_limit_compiles_and_one_kib_more_does_not(chip):
    x = S((1024, 1024), jnp.bfloat16)
    (buffers,) = vmem_footprint.kernel_buffers(jax.make_jaxpr(matmul_schedule(128, 256, 128))(x, x))
    needed = vmem_footprint.footprint_bytes(buffers)
    assert refusal(matmul_schedule(128, 256, 128, vmem_limit_bytes=needed), x, x, chip=chip) is None
    error = refusal(matmul_schedule(128, 256, 128, vmem_limit_bytes=needed - KiB), x, x, chip=chip)
    assert error.vmem_needed_bytes == needed


def test_the_compiler_counts_of_the_graded_kernels():
    """917,504, 327,680 and 137,216 bytes: the figures test_vmem.py grades against."""
    graded = course_file("exercises/ch08/test_vmem.py")
    compiler()
    needed = []
    for what, build, operands, limit in graded.COMPILED:
        args = [S(shape, jnp.dtype(dtype)) for shape, dtype in operands]
        needed.append(refusal(build(limit), *args).vmem_needed_bytes)
    assert needed == [917_504, 327_680, 137_216]


# ------------------------------------------------------------------ the MXU pads


@pytest.mark.parametrize("m, k, v5e, v6e", [
    (256, 64, (32, {(0, 0, 42): 117, (0, 0, 50): 117}), (16, {(0, 0, 42): 105, (0, 0, 50): 105})),
    (256, 128, (32, {(0, 0, 42): 140, (0, 0, 50): 140}), (16, {(0, 0, 42): 133, (0, 0, 50): 133})),
    (8, 64, (2, None), (1, None)),
    (16, 64, (2, None), (1, None)),
    (40, 64, (6, None), (3, None)),
])
def test_the_mxus_padding_in_the_compilers_vmatmuls(m, k, v5e, v6e):
    """A one-block bf16 (m, k) @ (k, 256): ceil(m/16) · ceil(k/W) · ceil(256/W) vmatmul."""
    compile_for = compiler()
    x, y = S((m, k), jnp.bfloat16), S((k, 256), jnp.bfloat16)
    for chip, (pushes, bundles) in (("v5e", v5e), ("v6e", v6e)):
        kernel = compile_for(one_block_matmul, x, y, chip=chip, dumps=True).kernel()
        assert kernel.mxu_ops == pushes
        if bundles is not None:
            assert kernel.bundles == for_this_libtpu(bundles)


def test_an_f32_push_takes_8_rows():
    compiler()
    assert [vmatmuls(m, 128, 128, chip="v5e", dtype="float32") for m in (8, 16, 32)] == [1, 2, 4]


# What the chip measured, read off the committed rows and logs (tests/facts/measured.py).

def test_the_chip_streams_at_80_percent_of_its_spec_and_its_ridge_is_near_300_flop_per_byte():
    from . import measured
    from .reading import readme_prose

    reached = measured.achieved_bandwidths()
    spec = measured.V5E.hbm_bandwidth
    assert 0.78 < reached["add"] / spec < 0.82 and 0.86 < reached["skinny loop"] / spec < 0.9
    ridge = measured.practical_ridge()
    assert 290 < ridge < 310
    # the add's quoted time: a gate 00 row's (the runs differ in the last digit), at the bandwidth quoted
    page = readme_prose("ch08")
    quoted = [us for us in measured.gate_us(0, "add", "floor") if f"{us:.1f} µs" in page]
    assert quoted and f"{100663296 / (quoted[0] * 1e-6) / 1e9:.0f} GB/s" == f"{reached['add'] / 1e9:.0f} GB/s"
    figures = [f"{reached['add'] / 1e9:.0f} GB/s", f"{reached['skinny loop'] / 1e9:.0f} GB/s", f"{ridge:.1f} FLOP/byte",
               f"{measured.V5E.peak_flops / measured.V5E.hbm_bandwidth:.1f}"]
    assert [f for f in figures if f not in page] == []
    assert [f for f in figures[2:4] + figures[:1] if f not in readme_prose("ch11")] == []


def test_at_512_blocks_the_matmul_is_memory_bound_at_the_chips_bandwidth_and_a_step_costs_0_28_us():
    from . import measured
    from .reading import readme_prose

    sweep, add = measured.matmul_sweep(), measured.achieved_bandwidths()["add"]
    n = 4096
    flops = 2 * n ** 3
    small, large = measured.blocks_hbm_bytes(n, n, n, 512, 512), measured.blocks_hbm_bytes(n, n, n, 1024, 1024)
    assert measured.blocks_hbm_bytes(n, n, n, 1024, 1024) == large  # (1024, 512, 1024): bk does not enter
    compute_us = flops / measured.V5E.peak_flops * 1e6
    memory_us = small / add * 1e6
    assert memory_us > compute_us  # memory-bound on the chip, though over the spec's ridge
    assert flops / small > measured.V5E.peak_flops / measured.V5E.hbm_bandwidth
    assert flops / small < measured.practical_ridge() < flops / large
    pair = sweep["zeroed 1024x512x1024"] - sweep["zeroed 1024x1024x1024"]
    per_step = pair / (128 - 64)
    assert 0.25 < per_step < 0.3  # the solution's schedule ("zeroed"); a step is not half a microsecond
    figures = [f"{small:,} bytes", f"{flops / small:.1f} FLOP/byte", f"{memory_us:.1f} µs", f"{compute_us:.1f} µs",
               f"{large:,} bytes", f"{flops / large:.1f} FLOP/byte", f"{pair:.1f} µs", f"{per_step:.2f} µs",
               f"{sweep['zeroed 512x512x512']} µs", f"{sweep['zeroed 1024x512x1024']} µs",
               f"{sweep['zeroed 1024x1024x1024']} µs", f"{sweep['xla']} µs"]
    page = readme_prose("ch08")
    assert [f for f in figures if f not in page] == []
    ch11 = readme_prose("ch11").replace(",", "")
    assert [f for f in figures if f.replace(",", "") not in ch11 and f != f"{large:,} bytes"] == []
    assert "half a microsecond" not in page + readme_prose("ch11") + readme_prose("ch13")
    solution = (measured.COURSE / "solutions" / "ch11" / "matmul.py").read_text(encoding="utf-8")
    assert [f for f in (f"{sweep['zeroed 512x512x512']} us", f"{sweep['zeroed 1024x512x1024']} us",
                        f"{sweep['zeroed 1024x1024x1024']} us", f"{per_step:.2f} us") if f not in solution] == []
