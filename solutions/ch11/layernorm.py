"""LayerNorm forward over the last axis, one block of whole rows per grid step.

Statistics in f32: mean, then the biased variance (divide by N, as
torch.nn.LayerNorm and flax.linen.LayerNorm do), then
(x - mean) * rsqrt(var + eps) * gamma + beta. gamma and beta are one (1, N)
block that every grid step reads.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def layernorm_kernel(x_ref, g_ref, b_ref, o_ref, *, eps):
    x = x_ref[...].astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    var = jnp.mean(centered * centered, axis=-1, keepdims=True)
    y = centered * jax.lax.rsqrt(var + eps)
    y = y * g_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    o_ref[...] = y.astype(o_ref.dtype)


def layernorm(x: jax.Array, gamma: jax.Array, beta: jax.Array, *, eps: float = 1e-5,
              block_rows: int = 16) -> jax.Array:
    """LayerNorm of a 2-D array over its last axis; gamma and beta have shape (N,)."""
    if x.ndim != 2 or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ValueError(f"expected x (M, N), gamma (N,), beta (N,), got {x.shape}, "
                         f"{gamma.shape}, {beta.shape}")
    m, n = x.shape
    br = min(block_rows, m)
    row_spec = pl.BlockSpec((br, n), lambda i: (i, 0))
    param_spec = pl.BlockSpec((1, n), lambda i: (0, 0))

    return pl.pallas_call(
        functools.partial(layernorm_kernel, eps=eps),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(m, br),),
        in_specs=[row_spec, param_spec, param_spec],
        out_specs=row_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(x, gamma.reshape(1, n), beta.reshape(1, n))
