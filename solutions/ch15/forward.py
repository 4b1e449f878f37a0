"""Sliding-window flash attention forward: only the band of kv blocks is fetched or computed.

    out = softmax(q kᵀ · scale, window mask) v,   lse = logsumexp(q kᵀ · scale, window mask)

q (B, H, Sq, D); k, v (B, H, Skv, D) with Sq <= Skv. Query row r attends keys
r - window < c <= r (band.py). Returns out (B, H, Sq, D) in q's dtype and lse
(B, H, Sq) in float32, the residual the backward recomputes the probabilities from.

Schedule. Grid (B, H, Sq / block_q, band): the last axis does not walk every kv
block, only the widest band a q block needs (band.widest), so the grid has
O(S · window) steps rather than O(S²). At band step t, q block i works on kv block
first(i) + t. The index map clamps that block to last(i) (band.clamped): a q block
whose band is narrower than the widest one repeats its last block, the pipeline
issues no copy for a block index that did not change, and pl.when skips the
compute. The band axis carries the online softmax state (m, l, acc in VMEM
scratch, as chapter 13 derives it), so it is "arbitrary"; the other three axes are
"parallel" (BAND_SEMANTICS, shared with the backward's kernels).

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
# Grid (batch, head, resident block, band step): the band axis carries a running sum.
BAND_SEMANTICS = pltpu.CompilerParams(
    dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))


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


def scores(q, k, *, scale: float, window: int, row0, col0):
    """q kᵀ · scale on the MXU (inputs as stored, f32 out), masked to the band."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return band_mask(s * scale, row0, col0, window)


def fold_block(s, v, m_ref, l_ref, acc_ref) -> None:
    """Fold one block of masked scores s and its values v into its rows' running state."""
    m_old = m_ref[...]
    m_now = jnp.maximum(m_old, s.max(axis=1, keepdims=True))
    # Rows with no key of the band so far keep m = -inf; shifting them by 0 avoids -inf - -inf.
    shift = jnp.where(m_now == NEG_INF, 0.0, m_now)
    rescale = jnp.exp(m_old - shift)  # exp(x - m_old) · exp(m_old - shift) = exp(x - shift)
    p = jnp.exp(s - shift)
    l_ref[...] = rescale * l_ref[...] + p.sum(axis=1, keepdims=True)
    # P rounded to v's dtype to feed the MXU; the product accumulates in f32.
    acc_ref[...] = rescale * acc_ref[...] + jnp.dot(p.astype(v.dtype), v,
                                                    preferred_element_type=jnp.float32)
    m_ref[...] = m_now


def forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                   scale: float, window: int, block_q: int, block_kv: int, num_kv_blocks: int):
    i, t = pl.program_id(2), pl.program_id(3)
    j, in_band = band.at_step(band.kv_blocks, i, t, block_q=block_q, block_kv=block_kv,
                              window=window, num_kv_blocks=num_kv_blocks)

    @pl.when(t == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    @pl.when(in_band)
    def _step():
        s = scores(q_ref[...], k_ref[...], scale=scale, window=window, row0=i * block_q,
                   col0=j * block_kv)
        fold_block(s, v_ref[...], m_ref, l_ref, acc_ref)

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
    per_row = lambda b, h, i, t: (b, h, i, 0)  # noqa: E731 - the resident q block
    in_band = lambda b, h, i, t: (b, h, band.clamped(band.kv_blocks, i, t, **sizes), 0)  # noqa: E731
    rows = pl.BlockSpec((None, None, block_q, head_dim), per_row)
    keys = pl.BlockSpec((None, None, block_kv, head_dim), in_band)
    out, lse = pl.pallas_call(
        functools.partial(forward_kernel, scale=scale, **sizes),
        grid=(batch, heads, q_len // block_q, steps),
        in_specs=[rows, keys, keys],
        out_specs=(rows, pl.BlockSpec((None, None, block_q, 1), per_row)),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, q_len, 1), jnp.float32)),
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32)
                        for shape in ((block_q, 1), (block_q, 1), (block_q, head_dim))],
        compiler_params=BAND_SEMANTICS,
    )(q, k, v)
    return out, lse[..., 0]
