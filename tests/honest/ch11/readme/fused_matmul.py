"""Exercise ch11.fused_matmul: my matmul, with the bias and the activation in _flush."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _activate(z, activation):
    if activation == "relu":
        return jnp.maximum(z, 0)
    if activation == "gelu":
        return jax.nn.gelu(z, approximate=True)
    return z


def fused_kernel(x_ref, w_ref, b_ref, o_ref, acc_ref, *, activation):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _flush():
        z = acc_ref[...] + b_ref[...].astype(jnp.float32)
        o_ref[...] = _activate(z, activation).astype(o_ref.dtype)


def matmul_bias_act(x: jax.Array, w: jax.Array, b: jax.Array, *, activation: str = "relu",
                    bm: int = 128, bk: int = 128, bn: int = 128) -> jax.Array:
    """activation(x @ w + b) in x's dtype."""
    m, k = x.shape
    _, n = w.shape
    bm, bk, bn = min(bm, m), min(bk, k), min(bn, n)
    return pl.pallas_call(
        functools.partial(fused_kernel, activation=activation),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                  pl.BlockSpec((1, bn), lambda i, j, kk: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, w, b.reshape(1, n))
