"""A sum over the leading axis, the output block as its own f32 accumulator.

x (L, M, N) -> out (M, N) = sum over L, in float32. Grid (M/bm, N/bn, L/bl): step
(i, j, l) adds x's (bl, bm, bn) block (l, i, j) into output block (i, j). The output's
index map ignores l, so its block stays in VMEM for the whole l loop and reaches HBM
once, after the last l step; being float32 itself, it needs no scratch accumulator.

The reduction axis carries the running sum from step to step, so it is the last grid
axis (its steps for one output block are consecutive: an output block is never read
back from HBM, so a revisit would start over) and "arbitrary" (in order, on one
core). i and j are "parallel". A ragged last block along L is padding past the end of
x, which must not be added: it is masked with jnp.where (its values are unspecified;
NaN under TPU interpret mode, and 0 * NaN is NaN).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def sum_kernel(x_ref, o_ref, *, length: int):
    l = pl.program_id(2)

    @pl.when(l == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    x = x_ref[...].astype(jnp.float32)
    block = x.shape[0]
    if length % block:  # only a ragged L has a partial last block
        position = l * block + jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
        x = jnp.where(position < length, x, 0.0)
    o_ref[...] += jnp.sum(x, axis=0)


def sum_leading_axis(x: jax.Array, *, bl: int = 8, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.sum(axis=0) in float32 for x (L, M, N) of any float dtype; any L, M and N."""
    if x.ndim != 3:
        raise ValueError(f"sum_leading_axis expects (L, M, N), got shape {x.shape}")
    length, m, n = x.shape
    bl, bm, bn = min(bl, length), min(bm, m), min(bn, n)
    return pl.pallas_call(
        functools.partial(sum_kernel, length=length),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(length, bl)),
        in_specs=[pl.BlockSpec((bl, bm, bn), lambda i, j, l: (l, i, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, l: (i, j)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x)
