"""LayerNorm and RMSNorm over the last axis, statistics in f32.

LayerNorm centres and scales: y = (x - mean) / sqrt(var + eps) * gamma + beta,
with the *biased* variance (divide by N, as torch.nn.LayerNorm and flax do).
RMSNorm (Zhang & Sennrich, 2019; used by LLaMA, Gemma) skips the centring and
the shift: y = x / sqrt(mean(x²) + eps) * gamma. Both compute their statistics
in f32 for bf16 inputs and round once at the end: a bf16 sum over a 4096-wide
row loses about 12 of its bits.
"""

import jax
import jax.numpy as jnp


def layer_norm(x: jax.Array, gamma: jax.Array, beta: jax.Array, *, eps: float = 1e-5) -> jax.Array:
    """LayerNorm over the last axis of x (..., N); gamma and beta are (N,). Returns x's dtype."""
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    return (y * gamma.astype(jnp.float32) + beta.astype(jnp.float32)).astype(x.dtype)


def rms_norm(x: jax.Array, gamma: jax.Array, *, eps: float = 1e-6) -> jax.Array:
    """RMSNorm over the last axis of x (..., N); gamma is (N,). Returns x's dtype."""
    xf = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(xf), axis=-1, keepdims=True)
    return (xf * jax.lax.rsqrt(ms + eps) * gamma.astype(jnp.float32)).astype(x.dtype)
