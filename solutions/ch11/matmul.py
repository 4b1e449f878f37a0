"""Tiled matmul with an f32 VMEM accumulator.

Grid (M/bm, N/bn, K/bk). Step (i, j, k) multiplies x block (i, k) by y block
(k, j). The output block (i, j) does not depend on k, so Pallas keeps it
resident in VMEM across the whole k loop and writes it to HBM once, after the
last k step. The running sum lives in an f32 scratch buffer: accumulating in
bf16 would round after every step and the error would grow with K.

Dimension semantics: i and j are independent ("parallel": the compiler may
split them across TensorCores or reorder them); k carries the accumulator from
step to step, so it must be "arbitrary" (run in order, on one core).

Blocks. The kernel reads x once per column block and y once per row block,
so bm and bn set its HBM traffic: at 512-blocks a 4096³ bf16 matmul moves
570 MB, 241 FLOP/byte, under the ~300 FLOP/byte a v5e's achieved bandwidth
(659 GB/s, 80% of the spec) puts its ridge at; at 1024-blocks 302 MB, 455
FLOP/byte, compute-bound. Measured there, device time interleaved with XLA's
721.7 us (bench/tpu/matmul_sweep.log): 942.8 us at 512-blocks, 755.5 us at
(1024, 512, 1024), 737.8 us at 1024-blocks (1.02x). The last two move the
same bytes in 128 and 64 grid steps: a step costs about 0.28 us of its own.
At 1024-blocks the VMEM, x, y and output blocks double-buffered plus the f32 accumulator
and one f32 product in flight, is 20 MiB in bf16: over the v5e's 16 MiB
default scoped limit, so the kernel asks for what it needs
(`vmem_limit_bytes`, with half again for what the estimate leaves out).
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _flush():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


DEFAULT_SCOPED_VMEM = 12 * 2**20  # under a v5e's 16 MiB default limit, with room for the compiler's own


def vmem_limit(bm: int, bk: int, bn: int, itemsize: int) -> int | None:
    """The scoped VMEM to ask for, where the blocks need more than the default gives; else None."""
    needed = 2 * (bm * bk + bk * bn + bm * bn) * itemsize + 2 * 4 * bm * bn
    return None if needed <= DEFAULT_SCOPED_VMEM else min(needed * 3 // 2, 100 * 2**20)


def matmul(x: jax.Array, y: jax.Array, *, bm: int = 1024, bk: int = 1024, bn: int = 1024) -> jax.Array:
    """x @ y in x's dtype, accumulated in f32. Each dimension must divide by its block."""
    (m, k), (k2, n) = x.shape, y.shape
    if k != k2 or x.dtype != y.dtype:
        raise ValueError(f"matmul expects (M, K) @ (K, N) of one dtype, got {x.shape} {x.dtype} "
                         f"@ {y.shape} {y.dtype}")
    bm, bk, bn = min(bm, m), min(bk, k), min(bn, n)
    for dim, size, block in (("M", m, bm), ("K", k, bk), ("N", n, bn)):
        if size % block:
            raise ValueError(f"matmul: {dim}={size} is not a multiple of its block {block}")
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=vmem_limit(bm, bk, bn, x.dtype.itemsize)),
    )(x, y)
