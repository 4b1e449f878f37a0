"""What XLA fuses, and what it cannot.

XLA fuses along dataflow edges: a chain of elementwise ops, with broadcasts of
small operands and a reduction at the end, becomes one kernel that reads its
inputs once and writes its output once. gelu_bias below is such a chain: an add
of a broadcast bias, a cube, a tanh, a few multiplies, all one fusion.

What XLA will not do is change the algorithm. Naive attention is
softmax(q kᵀ) v: the softmax needs the max and the sum of a whole score row
before any probability exists, and the second matmul needs every probability of
a row. XLA's fusion keeps that data flow, so the (Sq, Skv) score matrix is an
intermediate buffer written to memory and read back, and the program is several
kernels. Computing attention without the score matrix (chapter 5) is a
different algorithm; no fusion pass derives it.
"""

import jax
import jax.numpy as jnp

SQRT_2_OVER_PI = 0.7978845608028654


def gelu_bias(x: jax.Array, b: jax.Array) -> jax.Array:
    """gelu(x + b), tanh approximation, in f32, x (M, N), b (N,): one fusion in the optimised HLO."""
    z = x.astype(jnp.float32) + b.astype(jnp.float32)  # converts fuse like any elementwise op
    return (0.5 * z * (1.0 + jnp.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)))).astype(x.dtype)


def naive_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v (B, H, S, D), written the obvious way."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)
