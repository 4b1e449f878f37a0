"""Flash attention forward: online softmax over kv blocks, the score matrix never in HBM.

Write flash_forward(q, k, v, *, causal, scale, block_q, block_kv) -> (out, lse):

  q (B, H, Sq, D); k, v (B, Hkv, Skv, D) with H a multiple of Hkv (grouped-query
  attention when Hkv < H: query head h reads kv head h // (H // Hkv), see gqa.py).
  out (B, H, Sq, D) in q's dtype: softmax(q kᵀ · scale, causal mask) v, scores and
  softmax in f32, P rounded to v's dtype before P·V, P·V accumulated in f32.
  lse (B, H, Sq) float32: logsumexp over the allowed keys of q kᵀ · scale.
  scale defaults to D ** -0.5. Causal masks are aligned top-left: query i sees keys
  0..i, whatever Sq and Skv.

Block sizes are clamped to the lengths (min(block_q, Sq)); a length that the clamped
block does not divide is refused with a ValueError naming the length and the block.

One pallas_call: grid (B, H, Sq // block_q, Skv // block_kv), kv axis last and
"arbitrary", VMEM scratch for the running max m, the running sum l and the f32
accumulator acc. The chapter's README derives the update.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, gqa


def flash_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                  scale: float | None = None, block_q: int = 512,
                  block_kv: int = 2048) -> tuple[jax.Array, jax.Array]:
    """(out, lse): attention in q's dtype and the rows' logsumexp in float32."""
    raise NotImplementedError("write flash_forward(): the online-softmax kernel over kv blocks")
