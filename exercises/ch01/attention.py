"""Exercise ch01.attention: reference attention with scale, causal, GQA and a mask.

    out = softmax(q kᵀ · scale + masks) v

Contract:
  - q is (B, H, Sq, D); k and v are (B, Hkv, Skv, D) with Hkv dividing H:
    query head h reads kv head h // (H // Hkv) (grouped-query attention;
    Hkv == 1 is multi-query attention);
  - scale defaults to D ** -0.5;
  - causal=True: query i sees keys 0..i (aligned top-left, whatever Skv);
  - mask (optional, boolean, broadcastable to (B, H, Sq, Skv)) is True where a
    query may attend; it combines with causal; a query with no allowed key
    returns zeros (use your softmax from softmax.py: `from . import softmax`);
  - scores and softmax in f32; round the probabilities to v's dtype before
    multiplying by v, accumulate in f32, return q's dtype;
  - differentiable in q, k and v.
"""

import jax
import jax.numpy as jnp

from . import softmax as softmax_module


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None = None, *,
              causal: bool = False, scale: float | None = None) -> jax.Array:
    """softmax(q kᵀ · scale, masked) v in q's dtype; GQA when k, v have fewer heads than q."""
    raise NotImplementedError("write attention(): scores in f32, mask with -inf, softmax, then P·V")
