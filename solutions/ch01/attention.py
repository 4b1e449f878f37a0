"""Reference attention: scale, causal mask, grouped-query heads, optional boolean mask.

    out = softmax(q kᵀ · scale + masks) v,   q (B, H, Sq, D), k and v (B, Hkv, Skv, D)

Every choice here is one a flash kernel must reproduce later:

  - scale defaults to D ** -0.5;
  - grouped-query attention: H query heads share Hkv kv heads, query head h
    reading kv head h // (H // Hkv); Hkv == H is ordinary multi-head attention,
    Hkv == 1 multi-query attention;
  - causal masks are aligned top-left: query i sees keys 0..i, whatever Skv;
  - `mask` (boolean, broadcastable to (B, H, Sq, Skv)) is True where a query may
    attend; a query with no allowed key returns zeros (the masked softmax's
    convention, see softmax.py);
  - scores and softmax in f32 whatever the input dtype; the probabilities are
    rounded to v's dtype before P·V, as a kernel feeding the MXU does; the
    P·V product accumulates in f32 and is rounded once to q's dtype.
"""

import jax
import jax.numpy as jnp

from . import softmax as softmax_module


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None = None, *,
              causal: bool = False, scale: float | None = None) -> jax.Array:
    """softmax(q kᵀ · scale, masked) v in q's dtype; GQA when k, v have fewer heads than q."""
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"{h} query heads cannot be shared by {hkv} kv heads")
    if scale is None:
        scale = d ** -0.5
    group = h // hkv
    # Group the query heads by the kv head they read instead of copying k and v.
    qg = q.reshape(b, hkv, group, sq, d)
    s = jnp.einsum("bkgqd,bksd->bkgqs", qg, k, preferred_element_type=jnp.float32) * scale
    s = s.reshape(b, h, sq, skv)
    allowed = jnp.ones((sq, skv), bool)
    if causal:
        allowed = jnp.arange(sq)[:, None] >= jnp.arange(skv)[None, :]
    if mask is not None:
        allowed = allowed & mask
    s = jnp.where(allowed, s, -jnp.inf)
    p = softmax_module.softmax(s, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgqs,bksd->bkgqd", p.reshape(b, hkv, group, sq, skv), v,
                     preferred_element_type=jnp.float32)
    return out.reshape(b, h, sq, d).astype(q.dtype)
