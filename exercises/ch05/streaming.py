"""Exercise ch05.streaming: streaming attention with lax.scan over key blocks.

Compute softmax(q kᵀ · scale [causal]) v without ever forming the (Sq, Skv)
score matrix: walk the keys block_k at a time with jax.lax.scan, carrying per
query row
    m    running max of the scaled scores seen so far       (B, H, Sq)    f32
    l    running sum of exp(s - m)                          (B, H, Sq)    f32
    acc  running sum of exp(s - m) · v                      (B, H, Sq, D) f32
and rescaling l and acc by exp(m_old - m_new) whenever the max grows.

Contract (both functions):
  - q (B, H, Sq, D); k, v (B, Hkv, Skv, D), Hkv dividing H (query head h reads
    kv head h // (H // Hkv)); block_k divides Skv: raise ValueError otherwise (a
    length with keys past the last whole block, or fewer keys than one block), never
    walk the whole blocks and leave the rest out;
  - scale defaults to D ** -0.5; causal masks are top-left: query i sees keys 0..i;
  - scores, m, l, acc in f32; round the probabilities exp(s - m) to v's dtype
    before multiplying by v; streaming_attention returns acc / l in q's dtype;
  - streaming_states returns (m, l, acc) after every block, stacked on a new
    leading axis of length Skv // block_k: m and l (n, B, H, Sq), acc (n, B, H, Sq, D).
    After step j, acc / l must equal attention over keys [0, (j + 1) · block_k).
"""

import jax
import jax.numpy as jnp
from jax import lax


def streaming_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                        scale: float | None = None, block_k: int = 128) -> jax.Array:
    """softmax(q kᵀ · scale) v, one key block at a time; q (B, H, Sq, D), k and v (B, Hkv, Skv, D)."""
    raise NotImplementedError("write streaming_attention(): lax.scan over key blocks carrying (m, l, acc)")


def streaming_states(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                     scale: float | None = None, block_k: int = 128):
    """(m, l, acc) after every key block, stacked: (n, B, H, Sq), (n, B, H, Sq), (n, B, H, Sq, D), f32."""
    raise NotImplementedError("write streaming_states(): the same scan, returning the carry as its per-step output")
