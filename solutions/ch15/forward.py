"""Sliding-window flash attention forward: only the band of kv blocks is fetched or computed.

    out = softmax(q kᵀ · scale, window mask) v,   lse = logsumexp(q kᵀ · scale, window mask)

q (B, H, Sq, D); k, v (B, H, Skv, D) with Sq <= Skv. Query row r attends keys
r - window < c <= r (band.py). Returns out (B, H, Sq, D) in q's dtype and lse
(B, H, Sq) in float32, the residual the backward recomputes the probabilities from.

Schedule. Grid (B, H, Sq / block_q, band): the last axis does not walk every kv
block, only the widest band a q block needs (band.widest), so the grid has
O(S · window) steps rather than O(S²). At band step t, q block i works on kv block
first(i) + t. The index map clamps that block to last(i): a q block whose band is
narrower than the widest one repeats its last block, the pipeline issues no copy
for a block index that did not change, and pl.when skips the compute. The band
axis carries the online softmax state (m, l, acc in VMEM scratch, as chapter 13
derives it), so it is "arbitrary"; the other three axes are "parallel".

Only the blocks the band's two edges cross need the elementwise mask; it is applied
to every block, which costs a compare and a select per score and keeps one code path.

Block sizes come as a frozen BlockSizes (hashable: a jax.custom_vjp non-diff
argument), clamped to the lengths first; a length the block does not divide, a
window below 1 and Sq > Skv are refused with a ValueError naming the dimension and
the block.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import band

NEG_INF = float("-inf")


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows of q and keys of k, v per grid step (both multiples of 8, or the whole length)."""

    block_q: int = 128
    block_kv: int = 128


def check_shapes(q: jax.Array, k: jax.Array, window: int, blocks: BlockSizes) -> BlockSizes:
    """The block sizes clamped to the lengths; a ValueError for anything the kernels refuse."""
    (_, heads, q_len, _), (_, kv_heads, kv_len, _) = q.shape, k.shape
    if heads != kv_heads:
        raise ValueError(f"q has {heads} heads and k {kv_heads}: one kv head per query head")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window {window!r} must be an int >= 1 (keys a query sees, itself included)")
    if q_len > kv_len:
        raise ValueError(f"q length {q_len} > kv length {kv_len}: rows past the last key would "
                         f"see no key at all")
    clamped = BlockSizes(min(blocks.block_q, q_len), min(blocks.block_kv, kv_len))
    for name, length, block in (("q length", q_len, clamped.block_q),
                                ("kv length", kv_len, clamped.block_kv)):
        if length % block:
            raise ValueError(f"{name} {length} is not a multiple of the block size {block}: "
                             f"pad the sequence or pick a block that divides it")
    return clamped


def band_mask(s, row0, col0, window: int):
    """Scores s of rows row0.. and keys col0.., with every pair outside the band at -inf."""
    rows = row0 + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = col0 + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return jnp.where((cols <= rows) & (cols > rows - window), s, NEG_INF)


def forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                   scale: float, window: int, block_q: int, block_kv: int, num_kv_blocks: int):
    i, t = pl.program_id(2), pl.program_id(3)
    first, last = band.kv_blocks(i, block_q=block_q, block_kv=block_kv, window=window,
                                 num_kv_blocks=num_kv_blocks)
    j = first + t

    @pl.when(t == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(j <= last)
    def _step():
        q, k, v = q_ref[...], k_ref[...], v_ref[...]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32) * scale
        s = band_mask(s, i * block_q, j * block_kv, window)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        # A row none of whose keys so far lie in the band keeps m = -inf: shift it by 0.
        m_safe = jnp.where(m_new == NEG_INF, 0.0, m_new)
        alpha = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p.astype(v.dtype), v,
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = m_new

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        l = l_ref[...]
        o_ref[...] = (acc_ref[...] / l).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] + jnp.log(l)


def window_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                   scale: float | None = None,
                   blocks: BlockSizes = BlockSizes()) -> tuple[jax.Array, jax.Array]:
    """(out, lse): sliding-window attention in q's dtype and the rows' logsumexp in float32."""
    batch, heads, q_len, head_dim = q.shape
    kv_len = k.shape[2]
    blocks = check_shapes(q, k, window, blocks)
    block_q, block_kv = blocks.block_q, blocks.block_kv
    scale = head_dim ** -0.5 if scale is None else scale
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=kv_len // block_kv)
    steps = band.widest(band.kv_blocks, q_len // block_q, **sizes)

    def kv_index(b, h, i, t):  # past the band's end: stay on its last block (no new copy)
        first, last = band.kv_blocks(i, **sizes)
        return b, h, jnp.minimum(first + t, last), 0

    q_spec = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i, t: (b, h, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
    lse_spec = pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, t: (b, h, i, 0))
    out, lse = pl.pallas_call(
        functools.partial(forward_kernel, scale=scale, **sizes),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, q_len, 1), jnp.float32)),
        grid=(batch, heads, q_len // block_q, steps),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, lse_spec),
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, lse[..., 0]
