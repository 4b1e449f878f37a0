"""Exercise ch01.norms: LayerNorm and RMSNorm over the last axis.

  layer_norm: y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased (divide by N)
  rms_norm:   y = x / sqrt(mean(x²) + eps) * gamma

x is (..., N) in f32 or bf16, gamma and beta are (N,). Compute the statistics in
f32 and return x's dtype. Both must be differentiable in every input.
"""

import jax
import jax.numpy as jnp


def layer_norm(x: jax.Array, gamma: jax.Array, beta: jax.Array, *, eps: float = 1e-5) -> jax.Array:
    """LayerNorm over the last axis of x (..., N); gamma and beta are (N,). Returns x's dtype."""
    raise NotImplementedError("write layer_norm(): mean, biased variance over the last axis, in f32")


def rms_norm(x: jax.Array, gamma: jax.Array, *, eps: float = 1e-6) -> jax.Array:
    """RMSNorm over the last axis of x (..., N); gamma is (N,). Returns x's dtype."""
    raise NotImplementedError("write rms_norm(): x * rsqrt(mean(x²) + eps) * gamma, in f32")
