"""Tiled matmul with an f32 VMEM accumulator.

Grid (M/bm, N/bn, K/bk). Step (i, j, k) multiplies x block (i, k) by y block
(k, j). The output block (i, j) does not depend on k, so Pallas keeps it
resident in VMEM across the whole k loop and writes it to HBM once, after the
last k step. The running sum lives in an f32 scratch buffer: accumulating in
bf16 would round after every step and the error would grow with K.

Dimension semantics: i and j are independent ("parallel": the compiler may
split them across TensorCores or reorder them); k carries the accumulator from
step to step, so it must be "arbitrary" (run in order, on one core).
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


def matmul(x: jax.Array, y: jax.Array, *, bm: int = 128, bk: int = 128, bn: int = 128) -> jax.Array:
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
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)
