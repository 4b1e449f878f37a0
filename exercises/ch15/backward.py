"""Sliding-window flash attention backward: two band-skipping Pallas kernels behind a jax.custom_vjp.

Write window_attention(q, k, v, *, window, scale, blocks) -> out, differentiable:

  - a jax.custom_vjp whose forward rule calls forward.window_forward and saves
    (q, k, v, out, lse); Δ = rowsum(dO ∘ O) once, outside the kernels;
  - a dq kernel over each q block's band of kv blocks, and a dk/dv kernel over each
    kv block's band of q blocks (band.q_blocks), both clamping their index maps into
    the band and skipping out-of-band steps with pl.when;
  - the window mask exactly as the forward applies it;
  - blocks=None: the tuned blocks for this chip from autotune.tuned_blocks (read at
    call time), else forward.BlockSizes().

No (Sq, Skv) array may exist outside the kernels, in the forward or the backward.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import autotune, band, forward
from .forward import BlockSizes


def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                     scale: float | None = None, blocks: BlockSizes | None = None) -> jax.Array:
    """Sliding-window attention out (B, H, Sq, D), differentiable through the Pallas backward.

    blocks=None: the tuned blocks for this chip and problem from the autotuning cache
    (autotune.tuned_blocks, read at call time), else the default BlockSizes()."""
    raise NotImplementedError("write window_attention(): a custom_vjp with a dq and a dk/dv kernel")
