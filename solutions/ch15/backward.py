"""Sliding-window flash attention backward: two band-skipping Pallas kernels behind a jax.custom_vjp.

The forward (forward.py) saves out and the rows' logsumexp. The backward recomputes
P = exp(q kᵀ · scale - lse) block by block (exact: lse holds each row's max and
normaliser) and, with dO the output's cotangent and Δ = rowsum(dO ∘ O) computed once
outside the kernels (an (Sq, 1) vector, never an (Sq, Skv) array):

    dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP - Δ)
    dQ = dS K · scale                   dK = dSᵀ Q · scale

Two kernels, each keeping one gradient resident in VMEM, each walking only the band:

  - dq, grid (B, H, Sq/bq, band): as the forward, q block i visits kv blocks
    first(i) + t clamped to last(i) (band.kv_blocks), the band axis "arbitrary";
  - dk/dv, grid (B, H, Skv/bkv, band): kv block j stays resident while the q blocks
    that see it stream past (band.q_blocks), clamped the same way, the band axis
    "arbitrary". A kv block no query sees (keys past the last row) runs no step and
    writes zero gradients.

The window mask is the forward's (forward.band_mask): the backward must mask exactly
what the forward masked, or P differs from the probabilities the forward used. As in
the forward, a step whose kv block lies wholly inside the band runs unmasked.
P and dS are rounded to the input dtype before their matmuls; every product
accumulates in f32.

Decisions, each for a v5e:

  - The dk/dv kernel computes the transposed tiles, sᵀ = k qᵀ with keys on sublanes
    and q rows on lanes: dV = Pᵀ dO and dK = dSᵀ Q are then plain (keys, rows) x
    (rows, D) matmuls, with no transpose of a tile on the way to the MXU, and lse and
    Δ broadcast as rows.
  - lse and Δ travel as lane-dense rows, arrays (B, H, 1, Sq) (forward.StatRows: split
    into (1, block_q) rows where Pallas's TPU lowering refuses such a block of one row). The dq kernel, whose
    tiles put the rows on sublanes, turns its block into (block_q, 128) columns once
    per q block (a transpose in VMEM at its first band step) and keeps them in scratch.
  - P = exp2(log2(e) · (scale · s - lse)): one multiply per score, lse · log2(e)
    computed once outside the kernels.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import autotune, band, forward
from .forward import LANES, LOG2_E, BlockSizes, lanes

CONTRACT_D = (((1,), (1,)), ((), ()))  # a bᵀ for a (m, D) and b (n, D): no transpose of b


def _pair(s, dp, lse2, delta, *, scale, window, row0, col0, masked, rows_axis=0):
    """P and dS = P ∘ (dP - Δ) of one (q block, kv block) pair from its raw scores s and
    dP = dO Vᵀ, P recomputed from lse2 = lse · log2(e) and masked to the band."""
    if masked:
        s = forward.band_mask(s, row0, col0, window=window, rows_axis=rows_axis)
    p = jnp.exp2(s * (scale * LOG2_E) - lse2)
    return p, p * (dp - delta)


def _in_band_steps(step, in_band, row0, col0, *, block_q, block_kv, window):
    """step(masked) under in_band: unmasked where the kv block lies wholly inside the band."""
    inside = forward.inside_band(row0, col0, block_q=block_q, block_kv=block_kv, window=window)
    pl.when(in_band & inside)(functools.partial(step, False))
    pl.when(in_band & jnp.logical_not(inside))(functools.partial(step, True))


def _columns(row):
    """A (1, n) row as (n, LANES) columns, every lane holding the row's value."""
    return jnp.broadcast_to(row, (LANES, row.shape[1])).T


def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, acc_ref, lse_col,
              delta_col, *, scale: float, window: int, block_q: int, block_kv: int,
              num_kv_blocks: int):
    i, t = pl.program_id(2), pl.program_id(3)  # q block i resident, its band streaming
    j, in_band = band.at_step(band.kv_blocks, i, t, block_q=block_q, block_kv=block_kv,
                              window=window, num_kv_blocks=num_kv_blocks)

    @pl.when(t == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        lse_col[...] = _columns(lse_ref[...])
        delta_col[...] = _columns(delta_ref[...])

    def step(masked):
        k = k_ref[...]
        s = jax.lax.dot_general(q_ref[...], k, CONTRACT_D, preferred_element_type=jnp.float32)
        dp = jax.lax.dot_general(do_ref[...], v_ref[...], CONTRACT_D,
                                 preferred_element_type=jnp.float32)
        _, ds = _pair(s, dp, lanes(lse_col[...], block_kv), lanes(delta_col[...], block_kv),
                      scale=scale, window=window, row0=i * block_q, col0=j * block_kv,
                      masked=masked)
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    _in_band_steps(step, in_band, i * block_q, j * block_kv, block_q=block_q, block_kv=block_kv,
                   window=window)

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        dq_ref[...] = (acc_ref[...] * scale).astype(dq_ref.dtype)


def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_acc, dv_acc, *,
               scale: float, window: int, block_q: int, block_kv: int, num_q_blocks: int):
    j, t = pl.program_id(2), pl.program_id(3)  # kv block j resident, the q blocks seeing it streaming
    i, in_band = band.at_step(band.q_blocks, j, t, block_q=block_q, block_kv=block_kv,
                              window=window, num_q_blocks=num_q_blocks)

    @pl.when(t == 0)
    def _init():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    def step(masked):
        q, do = q_ref[...], do_ref[...]
        # Transposed tiles: sᵀ = k qᵀ and dPᵀ = v dOᵀ, keys on sublanes, q rows on lanes.
        st = jax.lax.dot_general(k_ref[...], q, CONTRACT_D, preferred_element_type=jnp.float32)
        dpt = jax.lax.dot_general(v_ref[...], do, CONTRACT_D, preferred_element_type=jnp.float32)
        pt, dst = _pair(st, dpt, lse_ref[...], delta_ref[...], scale=scale, window=window,
                        row0=i * block_q, col0=j * block_kv, masked=masked, rows_axis=1)
        dv_acc[...] += jnp.dot(pt.astype(do.dtype), do, preferred_element_type=jnp.float32)  # Pᵀ dO
        dk_acc[...] += jnp.dot(dst.astype(q.dtype), q, preferred_element_type=jnp.float32)  # dSᵀ Q

    _in_band_steps(step, in_band, i * block_q, j * block_kv, block_q=block_q, block_kv=block_kv,
                   window=window)

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        dk_ref[...] = (dk_acc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def window_backward(q, k, v, out, lse, do, *, window: int, scale: float | None = None,
                    blocks: BlockSizes = BlockSizes()):
    """(dq, dk, dv) of sliding-window attention at (q, k, v), given the forward's out and lse."""
    batch, heads, q_len, head_dim = q.shape
    kv_len = k.shape[2]
    blocks = forward.check_shapes(q, k, window, blocks, scale)
    block_q, block_kv = blocks.block_q, blocks.block_kv
    scale = head_dim ** -0.5 if scale is None else scale
    n_q, n_kv = q_len // block_q, kv_len // block_kv
    # Row statistics as lane-dense rows: Δ = rowsum(dO ∘ O), and lse in base 2.
    stat_rows = forward.StatRows(batch, heads, q_len, block_q)
    delta = jnp.sum(out.astype(jnp.float32) * do.astype(jnp.float32), axis=-1)
    operands = (q, k, v, do, stat_rows.of(lse * LOG2_E), stat_rows.of(delta))
    common = dict(scale=scale, window=window, block_q=block_q, block_kv=block_kv)
    by_q = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=n_kv)
    by_kv = dict(block_q=block_q, block_kv=block_kv, window=window, num_q_blocks=n_q)

    def specs(q_index, kv_index):
        """BlockSpecs of (q, k, v, dO, lse, Δ) for the two index maps."""
        q_rows = pl.BlockSpec((None, None, block_q, head_dim), q_index)
        kv_rows = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
        stat = stat_rows.spec(lambda *ids: q_index(*ids)[:3])
        return [q_rows, kv_rows, kv_rows, q_rows, stat, stat]

    # dq: q block i resident, the kv blocks of its band stream past.
    resident_q = lambda b, h, i, t: (b, h, i, 0)  # noqa: E731
    band_kv = lambda b, h, i, t: (b, h, band.clamped(band.kv_blocks, i, t, **by_q), 0)  # noqa: E731
    dq = pl.pallas_call(
        functools.partial(dq_kernel, **common, num_kv_blocks=n_kv),
        grid=(batch, heads, n_q, band.widest(band.kv_blocks, n_q, **by_q)),
        in_specs=specs(resident_q, band_kv),
        out_specs=pl.BlockSpec((None, None, block_q, head_dim), resident_q),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((block_q, head_dim), jnp.float32),
                        pltpu.VMEM((block_q, LANES), jnp.float32),
                        pltpu.VMEM((block_q, LANES), jnp.float32)],
        compiler_params=forward.BAND_SEMANTICS,
    )(*operands)

    # dk, dv: kv block j resident, the q blocks that see it stream past.
    band_q = lambda b, h, j, t: (b, h, band.clamped(band.q_blocks, j, t, **by_kv), 0)  # noqa: E731
    resident_kv = pl.BlockSpec((None, None, block_kv, head_dim), lambda b, h, j, t: (b, h, j, 0))
    dk, dv = pl.pallas_call(
        functools.partial(dkv_kernel, **common, num_q_blocks=n_q),
        grid=(batch, heads, n_kv, band.widest(band.q_blocks, n_kv, **by_kv)),
        in_specs=specs(band_q, lambda b, h, j, t: (b, h, j, 0)),
        out_specs=(resident_kv, resident_kv),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        scratch_shapes=[pltpu.VMEM((block_kv, head_dim), jnp.float32)] * 2,
        compiler_params=forward.BAND_SEMANTICS,
    )(*operands)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attention(q, k, v, window, scale, blocks):
    return forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)[0]


def _attention_fwd(q, k, v, window, scale, blocks):
    out, lse = forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)
    return out, (q, k, v, out, lse)


def _attention_bwd(window, scale, blocks, residuals, do):
    q, k, v, out, lse = residuals
    return window_backward(q, k, v, out, lse, do, window=window, scale=scale, blocks=blocks)


_attention.defvjp(_attention_fwd, _attention_bwd)


def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                     scale: float | None = None, blocks: BlockSizes | None = None) -> jax.Array:
    """Sliding-window attention out (B, H, Sq, D), differentiable through the Pallas backward.

    blocks=None: the tuned blocks for this chip and problem from the autotuning cache
    (autotune.tuned_blocks, read at call time), else the default BlockSizes()."""
    if blocks is None:
        tuned = autotune.tuned_blocks(q.shape, k.shape, q.dtype, window)
        blocks = BlockSizes(**tuned) if tuned else BlockSizes()
    return _attention(q, k, v, window, scale, blocks)
