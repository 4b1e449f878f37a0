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

Only the blocks the band's two edges cross need the elementwise mask: a step whose kv
block lies wholly inside the band (every key seen by every row of the q block) runs an
unmasked copy of the step, the others the masked one.

Decisions, each for a v5e (WRITEUP.md gives the compiler's figures behind them):

  - m and l are 128 lanes wide (every lane holds the row's value), so a row's max and
    sum reach a (block_q, block_kv) tile by repeating whole vector registers; a
    (block_q, 1) array pads to the same VMEM anyway.
  - The scale is applied inside the exponential, exp2((s - m) · scale · log2 e), with m
    the running max of the raw scores: one multiply per score instead of two (s ·
    scale, and the log2 e that exp takes before its exp2). This needs scale > 0.
  - lse leaves the kernel as a lane-dense row, an array (B, H, 1, Sq): a (B, H, Sq, 1)
    array pads each row's number to 128 lanes in HBM too, and taking the padding off
    after the call is an XLA pass over 128 times the bytes. Pallas's TPU lowering takes a (1, block_q)
    block of that array only where block_q is a multiple of 128 or all of Sq; a smaller
    block_q writes the (1, block_q) rows of a (B, H, Sq / block_q, 1, block_q) array
    instead, whose last two dimensions the block spans (StatRows).

Block sizes come as a frozen BlockSizes (hashable: a jax.custom_vjp non-diff
argument), clamped to the lengths first; a length the block does not divide, a
window below 1 and Sq > Skv are refused with a ValueError naming the dimension and
the block.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import band

NEG_INF = float("-inf")
LANES = 128  # width of the row statistics: one vector register row
LOG2_E = math.log2(math.e)
# Grid (batch, head, resident block, band step): the band axis carries a running sum.
BAND_SEMANTICS = pltpu.CompilerParams(
    dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows of q and keys of k, v per grid step (both multiples of 8, or the whole length)."""

    block_q: int = 512
    block_kv: int = 512


@dataclasses.dataclass(frozen=True)
class StatRows:
    """How one number per query row (lse, and the backward's Δ) travels between the kernels: as
    (1, block_q) rows. Both layouts are reshapes of (B, H, Sq); each block is one row of block_q."""

    batch: int
    heads: int
    q_len: int
    block_q: int

    @property
    def split(self) -> bool:
        """Whether block_q is a width Pallas's TPU lowering refuses as a block of one (B, H, 1, Sq) row (the last
        dimension of a block is a multiple of 128 or the whole dimension), so the rows are split."""
        return self.block_q % LANES != 0 and self.block_q != self.q_len

    @property
    def shape(self) -> tuple[int, ...]:
        if self.split:
            return (self.batch, self.heads, self.q_len // self.block_q, 1, self.block_q)
        return (self.batch, self.heads, 1, self.q_len)

    def spec(self, q_block) -> pl.BlockSpec:
        """The BlockSpec of q block i's row, for q_block(*grid ids) = (b, h, i)."""
        if self.split:
            return pl.BlockSpec((None, None, None, 1, self.block_q),
                                lambda *ids: (*q_block(*ids), 0, 0))
        return pl.BlockSpec((None, None, 1, self.block_q),
                            lambda *ids: (*q_block(*ids)[:2], 0, q_block(*ids)[2]))

    def of(self, stats: jax.Array) -> jax.Array:
        """(B, H, Sq) statistics in this layout."""
        return stats.reshape(self.shape)

    def unpack(self, rows: jax.Array) -> jax.Array:
        """This layout's rows back as (B, H, Sq)."""
        return rows.reshape(self.batch, self.heads, self.q_len)


def check_shapes(q: jax.Array, k: jax.Array, window: int, blocks: BlockSizes,
                 scale: float | None = None) -> BlockSizes:
    """The block sizes clamped to the lengths; a ValueError for anything the kernels refuse."""
    (_, heads, q_len, _), (_, kv_heads, kv_len, _) = q.shape, k.shape
    if heads != kv_heads:
        raise ValueError(f"q has {heads} heads and k {kv_heads}: one kv head per query head")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window {window!r} must be an int >= 1 (keys a query sees, itself included)")
    if scale is not None and not scale > 0:
        raise ValueError(f"scale {scale} must be positive: the running max is taken over the "
                         f"unscaled scores")
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


def band_mask(s, row0, col0, window: int, *, rows_axis: int = 0):
    """Scores s of rows row0.. and keys col0.. (rows along `rows_axis`, keys along the other
    axis), with every pair outside the band at -inf."""
    rows = row0 + jax.lax.broadcasted_iota(jnp.int32, s.shape, rows_axis)
    cols = col0 + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1 - rows_axis)
    return jnp.where((cols <= rows) & (cols > rows - window), s, NEG_INF)


def scores(q, k, *, window: int, row0, col0, masked: bool = True):
    """q kᵀ on the MXU (inputs as stored, f32 out, unscaled), masked to the band unless the
    block lies wholly inside it."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return band_mask(s, row0, col0, window) if masked else s


def inside_band(row0, col0, *, block_q: int, block_kv: int, window: int):
    """Whether every row of the q block at row0 sees every key of the kv block at col0."""
    return (col0 + block_kv - 1 <= row0) & (col0 > row0 + block_q - 1 - window)


def lanes(x, width: int):
    """A (rows, LANES) array whose lanes all hold one value per row, as (rows, width)."""
    if width <= LANES:
        return x[:, :width]
    if width % LANES:
        return jnp.broadcast_to(x[:, :1], (x.shape[0], width))
    return jnp.tile(x, (1, width // LANES))


def fold_block(s, v, m_ref, l_ref, acc_ref, *, scale: float, masked: bool) -> None:
    """Fold one block of raw scores s (masked ones at -inf) and its values v into its rows'
    running state; m is the running max of the raw scores, l and acc are taken against
    exp(scale · (s - m)) = exp2(scale · log2(e) · (s - m))."""
    m_old = m_ref[...]
    m_now = jnp.maximum(m_old, s.max(axis=1, keepdims=True))
    # Rows with no key of the band so far keep m = -inf; shifting them by 0 avoids -inf - -inf.
    # (Without a mask every score is finite, and so is m.)
    shift = jnp.where(m_now == NEG_INF, 0.0, m_now) if masked else m_now
    exp2_scale = scale * LOG2_E
    rescale = jnp.exp2((m_old - shift) * exp2_scale)  # exp(x - m_old) · exp(m_old - shift) = exp(x - shift)
    p = jnp.exp2((s - lanes(shift, s.shape[1])) * exp2_scale)
    l_ref[...] = rescale * l_ref[...] + p.sum(axis=1, keepdims=True)
    # P rounded to v's dtype to feed the MXU; the product accumulates in f32.
    acc_ref[...] = lanes(rescale, acc_ref.shape[1]) * acc_ref[...] + jnp.dot(
        p.astype(v.dtype), v, preferred_element_type=jnp.float32)
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

    def step(masked):
        s = scores(q_ref[...], k_ref[...], window=window, row0=i * block_q, col0=j * block_kv,
                   masked=masked)
        fold_block(s, v_ref[...], m_ref, l_ref, acc_ref, scale=scale, masked=masked)

    inside = inside_band(i * block_q, j * block_kv, block_q=block_q, block_kv=block_kv,
                         window=window)
    pl.when(in_band & inside)(functools.partial(step, False))
    pl.when(in_band & jnp.logical_not(inside))(functools.partial(step, True))

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        l = l_ref[...]
        o_ref[...] = (acc_ref[...] / lanes(l, o_ref.shape[1])).astype(o_ref.dtype)
        lse = m_ref[...] * scale + jnp.log(l)  # (block_q, LANES), every lane the row's value
        lse_ref[...] = lse.T[:1, :]  # the lane-dense (1, block_q) row


def window_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                   scale: float | None = None,
                   blocks: BlockSizes = BlockSizes()) -> tuple[jax.Array, jax.Array]:
    """(out, lse): sliding-window attention in q's dtype and the rows' logsumexp in float32."""
    batch, heads, q_len, head_dim = q.shape
    kv_len = k.shape[2]
    blocks = check_shapes(q, k, window, blocks, scale)
    block_q, block_kv = blocks.block_q, blocks.block_kv
    scale = head_dim ** -0.5 if scale is None else scale
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=kv_len // block_kv)
    steps = band.widest(band.kv_blocks, q_len // block_q, **sizes)
    per_row = lambda b, h, i, t: (b, h, i, 0)  # noqa: E731 - the resident q block
    in_band = lambda b, h, i, t: (b, h, band.clamped(band.kv_blocks, i, t, **sizes), 0)  # noqa: E731
    rows = pl.BlockSpec((None, None, block_q, head_dim), per_row)
    keys = pl.BlockSpec((None, None, block_kv, head_dim), in_band)
    stat_rows = StatRows(batch, heads, q_len, block_q)
    out, lse = pl.pallas_call(
        functools.partial(forward_kernel, scale=scale, **sizes),
        grid=(batch, heads, q_len // block_q, steps),
        in_specs=[rows, keys, keys],
        out_specs=(rows, stat_rows.spec(lambda b, h, i, t: (b, h, i))),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct(stat_rows.shape, jnp.float32)),
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32)
                        for shape in ((block_q, LANES), (block_q, LANES), (block_q, head_dim))],
        compiler_params=BAND_SEMANTICS,
    )(q, k, v)
    return out, stat_rows.unpack(lse)
