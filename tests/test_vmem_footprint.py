"""pytest_tpucourse.readers.vmem_footprint: the VMEM model reproduces the Mosaic compiler's figures."""

import importlib.util

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.readers import vmem_footprint

from .support import REPO

MiB = 2**20


def _bench():
    spec = importlib.util.spec_from_file_location("vmem_compiler_figures",
                                                  REPO / "bench" / "vmem_compiler_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


@pytest.mark.parametrize("case", BENCH.CASES, ids=[c[0] for c in BENCH.CASES])
def test_model_matches_what_the_compiler_printed(case):
    """bench/vmem_compiler_figures.py --compile printed these (libtpu 0.0.42.1, 2026-11-30)."""
    name, _, kernel, shapes, dtype = case
    needed, _ = BENCH.COMPILER[name]
    model = BENCH.model_bytes(kernel, shapes, dtype) / MiB
    assert model == pytest.approx(needed - BENCH.COMPILER_EXTRA_MIB.get(name, 0.0), abs=0.005)


def test_a_one_step_grid_single_buffers_what_the_compiler_accepted():
    """The 1024-block f32 matmul with a one-step grid compiled under v5e's 16 MiB limit."""
    model = BENCH.model_bytes(BENCH.matmul(1024, 1024, 1024), [(1024, 1024)] * 2, "float32")
    assert model == 16 * MiB


@pytest.mark.parametrize("rows, itemsize, padded", [
    (1, 4, 1), (2, 4, 2), (3, 4, 4), (5, 4, 8), (8, 4, 8), (12, 4, 16),
    (1, 2, 2), (3, 2, 4), (8, 2, 8), (24, 2, 24), (1, 1, 4), (5, 1, 8), (40, 1, 40),
])
def test_padded_rows(rows, itemsize, padded):
    assert vmem_footprint.padded_rows(rows, itemsize) == padded


def test_lanes_pad_to_128_and_leading_dims_multiply():
    assert vmem_footprint.padded_bytes((24576, 200), "float32") == 24 * MiB
    assert vmem_footprint.padded_bytes((2, 12, 64), "float32") == 2 * 16 * 128 * 4
    assert vmem_footprint.padded_bytes((300,), "bfloat16") == 2 * 384 * 2  # one row; bf16 packs 2


def test_blocks_left_in_hbm_or_smem_take_no_vmem_and_scratch_counts_once():
    def kernel(x_ref, s_ref, o_ref, acc_ref, sem_ref, idx_ref):
        o_ref[...] = x_ref[...]

    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((64, 256), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0)),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((16, 256), lambda i: (i, 0)),
        scratch_shapes=[pltpu.VMEM((16, 256), jnp.float32), pltpu.SemaphoreType.DMA,
                        pltpu.SMEM((4,), jnp.int32)])
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    (buffers,) = vmem_footprint.kernel_buffers(jax.make_jaxpr(call)(x, x))
    assert [(b.name, b.shape, b.count) for b in buffers] == [
        ("input 0", (16, 256), 2), ("output 0", (16, 256), 2), ("scratch 0", (16, 256), 1)]
    assert vmem_footprint.footprint_bytes(buffers) == 5 * 16 * 256 * 4
