"""Exercise ch06.reduction: sum over L with the f32 output block accumulating in place."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def sum_leading_axis(x: jax.Array, *, bl: int = 8, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.sum(axis=0) in float32 for x (L, M, N); a ragged last L block is masked."""
    depth, m, n = x.shape
    bl, bm, bn = min(bl, depth), min(bm, m), min(bn, n)
    ragged = depth % bl != 0

    def kernel(x_ref, total_ref):
        step = pl.program_id(2)
        block = x_ref[...].astype(jnp.float32)
        if ragged:  # only the last block holds padding, but every block may be checked
            layer = step * bl + jax.lax.broadcasted_iota(jnp.int32, (bl, 1, 1), 0)
            block = jnp.where(layer < depth, block, jnp.zeros_like(block))
        partial = block.sum(axis=0)
        total_ref[...] = jnp.where(step == 0, jnp.zeros_like(partial), total_ref[...]) + partial

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(depth, bl)),
        in_specs=[pl.BlockSpec((bl, bm, bn), lambda r, c, s: (s, r, c))],
        out_specs=pl.BlockSpec((bm, bn), lambda r, c, s: (r, c)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x)
