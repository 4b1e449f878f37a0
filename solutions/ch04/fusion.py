"""What XLA fuses, and what it cannot.

XLA fuses along dataflow edges: a chain of elementwise ops, with broadcasts of
small operands and a reduction at the end, becomes one kernel that reads its
inputs once and writes its output once. gelu_bias below is such a chain: an add
of a broadcast bias, a cube, a tanh, a few multiplies, all one fusion.

What XLA does not do is remove a pass over memory that the program's data flow
asks for. Naive attention is softmax(q kᵀ) v: the softmax needs the max and the
sum of a whole score row before any probability exists, and the second matmul
needs every probability of a row. XLA:CPU's fusion keeps that data flow: the
(Sq, Skv) scores are an intermediate buffer written to memory and read back, and
the program is several kernels. XLA:TPU rewrites the softmax and the second
matmul as an online-softmax Mosaic kernel of its own, so the probabilities never
leave it, but still writes the scores in one kernel and reads them in the next
(the chapter's README; exercises/ch12/dumps/v5e_naive_attention.hlo.txt).
Computing attention without the score matrix (chapter 5, flash attention in
chapter 13) is a different program; no compiler pass derives it.
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
