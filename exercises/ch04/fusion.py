"""Exercise ch04.fusion: a function XLA compiles to one fusion, and one it cannot.

gelu_bias(x, b): gelu(x + b) with the tanh approximation
    0.5 · z · (1 + tanh(sqrt(2/π) · (z + 0.044715 · z³))),  z = x + b,
computed in f32 and returned in x's dtype, x (M, N), b (N,). Its optimised HLO
(XLA:CPU) must be exactly one kernel, a fusion.

naive_attention(q, k, v): softmax(q kᵀ / sqrt(D)) v for q, k, v (B, H, S, D),
f32, written the obvious way (scores, softmax over keys, then P·V). Its
optimised HLO will be several kernels, one of which writes the (S, S) scores.
"""

import jax
import jax.numpy as jnp

SQRT_2_OVER_PI = 0.7978845608028654


def gelu_bias(x: jax.Array, b: jax.Array) -> jax.Array:
    """gelu(x + b), tanh approximation, in f32, x (M, N), b (N,): one fusion in the optimised HLO."""
    raise NotImplementedError("write gelu_bias(): plain jnp elementwise math; XLA does the fusing")


def naive_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v (B, H, S, D), written the obvious way."""
    raise NotImplementedError("write naive_attention(): two einsums and a softmax")
