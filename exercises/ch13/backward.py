"""Flash attention backward: two Pallas kernels behind a jax.custom_vjp.

Write flash_attention(q, k, v, *, causal, scale, block_q, block_kv) -> out, with the
shapes and conventions of forward.py, differentiable through your own kernels:

  - a jax.custom_vjp whose fwd rule calls forward.flash_forward and saves
    (q, k, v, out, lse), never the probabilities;
  - a bwd rule that computes delta = rowsum(dO ∘ O) (f32) and runs a dq kernel
    (grid (B, H, q blocks, kv blocks)) and a dk/dv kernel (grid (B, Hkv, kv blocks,
    group, q blocks)), each recomputing P = exp(q kᵀ · scale - lse) block by block:

        dV = Pᵀ dO    dP = dO Vᵀ    dS = P ∘ (dP - delta)
        dQ = dS K · scale           dK = dSᵀ Q · scale

dq, dk and dv come back in the dtypes of q, k and v. Under grouped-query attention
dk and dv of a kv head sum over the query heads of its group.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, forward, gqa


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                    scale: float | None = None, block_q: int = 512,
                    block_kv: int = 2048) -> jax.Array:
    """Attention out (B, H, Sq, D), differentiable through the Pallas backward kernels."""
    raise NotImplementedError("write flash_attention(): a custom_vjp with dq and dk/dv kernels")
