"""Sliding-window flash attention forward: only the band of kv blocks is fetched or computed.

Write window_forward(q, k, v, *, window, scale, blocks) -> (out, lse):

  q (B, H, Sq, D); k, v (B, H, Skv, D), Sq <= Skv. Query row r attends keys
  r - window < c <= r (band.py). out (B, H, Sq, D) in q's dtype: scores and softmax
  in f32, P rounded to v's dtype before P·V, P·V accumulated in f32. lse (B, H, Sq)
  float32: logsumexp over the allowed keys of q kᵀ · scale. scale defaults to D ** -0.5.

blocks is a BlockSizes (given below: frozen, so hashable, so a jax.custom_vjp
non-diff argument). Clamp each block to its length first; refuse with a ValueError
naming the number: a length the clamped block does not divide, a window below 1,
Sq > Skv (rows past the last key would see none).

One pallas_call, grid (B, H, Sq // block_q, band.widest(band.kv_blocks, ...)): the
last axis walks the band, not every kv block; clamp the k and v index maps into the
band (no new copy) and skip out-of-band steps with pl.when. The README derives it.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import band


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows of q and keys of k, v per grid step (both multiples of 8, or the whole length)."""

    block_q: int = 512
    block_kv: int = 512


def window_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                   scale: float | None = None,
                   blocks: BlockSizes = BlockSizes()) -> tuple[jax.Array, jax.Array]:
    """(out, lse): sliding-window attention in q's dtype and the rows' logsumexp in float32."""
    raise NotImplementedError("write window_forward(): the online softmax over the band's kv blocks")
