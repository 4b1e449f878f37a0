"""Exercise ch15.forward: chapter 13's online softmax, walking the band instead of every kv block."""

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

    block_q: int = 128
    block_kv: int = 128


def window_mask(s, i, j, *, window, block_q, block_kv):
    rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = j * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return jnp.where((cols <= rows) & (cols > rows - window), s, -jnp.inf)


def forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *, scale, window, sizes):
    i = pl.program_id(2)
    t = pl.program_id(3)
    j, in_band = band.at_step(band.kv_blocks, i, t, **sizes)

    @pl.when(t == 0)
    def _init():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(in_band)
    def _step():
        v = v_ref[...]
        s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32) * scale
        s = window_mask(s, i, j, window=window, block_q=sizes["block_q"], block_kv=sizes["block_kv"])
        m = m_ref[...]
        m_new = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        alpha = jnp.exp(m - shift)
        p = jnp.exp(s - shift)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] + jnp.log(l_ref[...])


def window_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                   scale: float | None = None,
                   blocks: BlockSizes = BlockSizes()) -> tuple[jax.Array, jax.Array]:
    """(out, lse): sliding-window attention in q's dtype and the rows' logsumexp in float32."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    if window < 1:
        raise ValueError(f"window {window} is below 1")
    if sq > skv:
        raise ValueError(f"q length {sq} is longer than kv length {skv}")
    block_q, block_kv = min(blocks.block_q, sq), min(blocks.block_kv, skv)
    if sq % block_q:
        raise ValueError(f"q length {sq} is not a multiple of the block size {block_q}")
    if skv % block_kv:
        raise ValueError(f"kv length {skv} is not a multiple of the block size {block_kv}")
    if scale is None:
        scale = d ** -0.5
    nq, nk = sq // block_q, skv // block_kv
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=nk)
    steps = band.widest(band.kv_blocks, nq, **sizes)

    def kv_index(b, h, i, t):
        return (b, h, band.clamped(band.kv_blocks, i, t, **sizes), 0)

    q_spec = pl.BlockSpec((None, None, block_q, d), lambda b, h, i, t: (b, h, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, d), kv_index)
    out, lse = pl.pallas_call(
        functools.partial(forward_kernel, scale=scale, window=window, sizes=sizes),
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, h, sq, 1), jnp.float32)],
        grid=(b, h, nq, steps),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=[q_spec, pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, t: (b, h, i, 0))],
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32), pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, lse[..., 0]
