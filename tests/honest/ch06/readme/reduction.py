"""Exercise ch06.reduction: the output block is its own accumulator across the L axis."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def sum_kernel(x_ref, o_ref, *, length, bl):
    l = pl.program_id(2)

    @pl.when(l == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    x = x_ref[...].astype(jnp.float32)
    rows = l * bl + jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
    x = jnp.where(rows < length, x, 0.0)
    o_ref[...] += jnp.sum(x, axis=0)


def sum_leading_axis(x: jax.Array, *, bl: int = 8, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.sum(axis=0) in float32 for x (L, M, N)."""
    length, m, n = x.shape
    bl, bm, bn = min(bl, length), min(bm, m), min(bn, n)
    return pl.pallas_call(
        functools.partial(sum_kernel, length=length, bl=bl),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(length, bl)),
        in_specs=[pl.BlockSpec((bl, bm, bn), lambda i, j, l: (l, i, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, l: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x)
