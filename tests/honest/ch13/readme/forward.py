"""Exercise ch13.forward: the online softmax of the README, m, l and acc in VMEM scratch."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, gqa


def flash_forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                         causal, scale, block_q, block_kv):
    i = pl.program_id(2)
    j = pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def _step():
        q = q_ref[...]
        k = k_ref[...]
        v = v_ref[...]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * scale
        if causal:
            rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = j * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, -jnp.inf)
        m = m_ref[...]
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # a row with every key masked so far
        alpha = jnp.exp(m - shift)
        p = jnp.exp(s - shift)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    if causal:
        pl.when(j <= causal_skipping.last_kv_block(i, block_q=block_q, block_kv=block_kv))(_step)
    else:
        _step()

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] + jnp.log(l_ref[...])


def flash_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                  scale: float | None = None, block_q: int = 128,
                  block_kv: int = 128) -> tuple[jax.Array, jax.Array]:
    """(out, lse): attention in q's dtype and the rows' logsumexp in float32."""
    b, h, sq, d = q.shape
    _, hkv, skv, _ = k.shape
    if scale is None:
        scale = d ** -0.5
    block_q, block_kv = min(block_q, sq), min(block_kv, skv)
    if sq % block_q:
        raise ValueError(f"q length {sq} is not a multiple of the block size {block_q}")
    if skv % block_kv:
        raise ValueError(f"kv length {skv} is not a multiple of the block size {block_kv}")
    group = h // hkv

    def kv_index(b, h, i, j):
        if causal:
            j = jnp.minimum(j, causal_skipping.last_kv_block(i, block_q=block_q, block_kv=block_kv))
        return (b, gqa.kv_head(h, group=group), j, 0)

    kernel = functools.partial(flash_forward_kernel, causal=causal, scale=scale, block_q=block_q,
                               block_kv=block_kv)
    out, lse = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, sq, 1), jnp.float32)],
        grid=(b, h, sq // block_q, skv // block_kv),
        in_specs=[
            pl.BlockSpec((None, None, block_q, d), lambda b, h, i, j: (b, h, i, 0)),
            pl.BlockSpec((None, None, block_kv, d), kv_index),
            pl.BlockSpec((None, None, block_kv, d), kv_index),
        ],
        out_specs=[
            pl.BlockSpec((None, None, block_q, d), lambda b, h, i, j: (b, h, i, 0)),
            pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, j: (b, h, i, 0)),
        ],
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, lse[..., 0]
