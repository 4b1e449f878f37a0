"""Flash attention backward: two Pallas kernels behind a jax.custom_vjp.

The forward (forward.py) saves out and the rows' logsumexp, never the probabilities.
The backward recomputes them block by block, P = exp(q kᵀ · scale - lse), which is
exact because lse already holds each row's max and normaliser. With dO the output's
cotangent and Δ = rowsum(dO ∘ O) (computed once, outside the kernels):

    dV = Pᵀ dO        dP = dO Vᵀ        dS = P ∘ (dP - Δ)
    dQ = dS K · scale                   dK = dSᵀ Q · scale

(Δ is rowsum(P ∘ dP): the softmax Jacobian's correction term, obtained from the saved
output instead of a second pass over the kv blocks.)

Two kernels, each accumulating one gradient in VMEM so no output is written twice:

  - dq kernel, grid (B, H, Sq/bq, Skv/bkv): a q block stays resident while the kv
    blocks stream past; the kv axis is "arbitrary". Causal: kv blocks past the
    diagonal are skipped exactly as in the forward.
  - dk/dv kernel, grid (B, Hkv, Skv/bkv, group, Sq/bq): a kv block stays resident
    while every q block of every query head that reads it streams past, so both
    the q-block axis and the group axis are "arbitrary": under grouped-query
    attention dK and dV are sums over the query heads of the group. Causal: q
    blocks wholly above the diagonal (before the first q block that sees the kv
    block) are neither fetched nor computed.

Both kernels walk the kv block of a step in the forward's sub-blocks, with its
causal skipping and diagonal-only masks (forward.over_kv_sub_blocks).

Decisions, each for a v5e:

  - The dk/dv kernel computes the transposed tiles, sᵀ = k qᵀ with keys on
    sublanes and q rows on lanes. Then dV = Pᵀ dO and dK = dSᵀ Q are plain
    (keys, rows) x (rows, D) matmuls, with no transpose of a (rows, keys) tile
    on the way to the MXU, and lse and Δ broadcast as rows.
  - lse and Δ travel as lane-dense rows, arrays (B, H, 1, Sq), for both kernels:
    the dk/dv kernel reads them as they are; the dq kernel, whose tiles put the
    rows on sublanes, turns its block into (block_q, 128) columns once per q block
    (a transpose in VMEM at its first kv step) and keeps them in scratch.
  - P = exp2(log2(e) · (scale · s - lse)): the scale and log2(e) fold into one
    multiply per score, with lse · log2(e) computed once outside the kernels.

P and dS are rounded to the input dtype before their matmuls (the MXU's bf16 inputs);
every product accumulates in f32.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, forward
from .forward import CONTRACT_D, LANES, LOG2_E, NEG_INF, lanes


def _probabilities(s, lse2, *, exp2_scale, rows=None, cols=None):
    """P from raw scores s, recomputed from the saved logsumexp: exp(scale · s - lse) is
    exp2(scale · log2(e) · s - lse2) with lse2 = lse · log2(e), broadcast like s. Given the
    row and key index of every score, the causally masked ones come out 0."""
    if rows is not None:
        s = jnp.where(rows >= cols, s, NEG_INF)
    return jnp.exp2(s * exp2_scale - lse2)


def _ds(p, dp, delta):
    """dS = P ∘ (dP - Δ), with dP = dO Vᵀ."""
    return p * (dp - delta)


def _columns(row):
    """A (1, n) row as (n, LANES) columns, every lane holding the row's value."""
    return jnp.broadcast_to(row, (LANES, row.shape[1])).T


def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, acc_ref, lse_col,
              delta_col, *, causal: bool, scale: float, block_q: int, block_kv: int, sub_kv: int):
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)
        lse_col[...] = _columns(lse_ref[...])
        delta_col[...] = _columns(delta_ref[...])

    def dq_fold(c, masked):
        keys = pl.ds(c * sub_kv, sub_kv)
        k, v = k_ref[keys, :], v_ref[keys, :]
        s = jax.lax.dot_general(q_ref[...], k, CONTRACT_D, preferred_element_type=jnp.float32)
        mask = {}
        if masked:
            mask = dict(rows=i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0),
                        cols=j * block_kv + c * sub_kv
                        + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1))
        p = _probabilities(s, lanes(lse_col[...], sub_kv), exp2_scale=scale * LOG2_E, **mask)
        dp = jax.lax.dot_general(do_ref[...], v, CONTRACT_D, preferred_element_type=jnp.float32)
        ds = _ds(p, dp, lanes(delta_col[...], sub_kv))
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    forward.over_kv_sub_blocks(dq_fold, i, j, causal=causal, block_q=block_q,
                               block_kv=block_kv, sub_kv=sub_kv)

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        dq_ref[...] = (acc_ref[...] * scale).astype(dq_ref.dtype)


def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
               dk_acc, dv_acc, *, causal: bool, scale: float, block_q: int, block_kv: int,
               sub_kv: int):
    j, r, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)

    @pl.when((r == 0) & (i == 0))
    def _init():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    def dkv_fold(c, masked):
        keys = pl.ds(c * sub_kv, sub_kv)
        q, do = q_ref[...], do_ref[...]
        k, v = k_ref[keys, :], v_ref[keys, :]
        # Transposed tiles: sᵀ = k qᵀ, keys on sublanes, q rows on lanes.
        st = jax.lax.dot_general(k, q, CONTRACT_D, preferred_element_type=jnp.float32)
        mask = {}
        if masked:
            mask = dict(rows=i * block_q + jax.lax.broadcasted_iota(jnp.int32, st.shape, 1),
                        cols=j * block_kv + c * sub_kv
                        + jax.lax.broadcasted_iota(jnp.int32, st.shape, 0))
        pt = _probabilities(st, lse_ref[...], exp2_scale=scale * LOG2_E, **mask)
        # dV += Pᵀ dO, dK += dSᵀ Q: the q rows are contracted.
        dv_acc[keys, :] += jnp.dot(pt.astype(do.dtype), do, preferred_element_type=jnp.float32)
        dpt = jax.lax.dot_general(v, do, CONTRACT_D, preferred_element_type=jnp.float32)
        dst = _ds(pt, dpt, delta_ref[...])
        dk_acc[keys, :] += jnp.dot(dst.astype(q.dtype), q, preferred_element_type=jnp.float32)

    forward.over_kv_sub_blocks(dkv_fold, i, j, causal=causal, block_q=block_q, block_kv=block_kv,
                               sub_kv=sub_kv)

    @pl.when((r == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def _flush():
        dk_ref[...] = (dk_acc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def flash_backward(q, k, v, out, lse, do, *, causal: bool = False, scale: float | None = None,
                   block_q: int = 512, block_kv: int = 2048):
    """(dq, dk, dv) of attention at (q, k, v), given the forward's out and lse."""
    batch, heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    block_q, block_kv = forward.check_blocks(q, k, block_q, block_kv)
    scale = forward.check_scale(scale, head_dim)
    group = heads // kv_heads
    n_q, n_kv = q_len // block_q, kv_len // block_kv
    # Row statistics as lane-dense rows (B, H, 1, Sq): Δ = rowsum(dO ∘ O), and lse in base 2.
    delta = jnp.sum(out.astype(jnp.float32) * do.astype(jnp.float32), axis=-1)[:, :, None, :]
    lse2 = (lse * LOG2_E)[:, :, None, :]
    params = dict(causal=causal, scale=scale, block_q=block_q, block_kv=block_kv,
                  sub_kv=forward.sub_block_size(block_q, block_kv, causal=causal))

    # dq: grid (b, h, i, j), kv blocks stream past a resident q block, skipped as in the forward.
    kv_index = forward.kv_index_map(causal=causal, block_q=block_q, block_kv=block_kv,
                                    group=group)
    q_rows = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0))
    row_stat = pl.BlockSpec((None, None, 1, block_q), lambda b, h, i, j: (b, h, 0, i))
    kv_rows = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
    dq = pl.pallas_call(
        functools.partial(dq_kernel, **params),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, heads, n_q, n_kv),
        in_specs=[q_rows, kv_rows, kv_rows, q_rows, row_stat, row_stat],
        out_specs=q_rows,
        scratch_shapes=[pltpu.VMEM((block_q, head_dim), jnp.float32),
                        pltpu.VMEM((block_q, LANES), jnp.float32),
                        pltpu.VMEM((block_q, LANES), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse2, delta)

    # dk, dv: grid (b, g, j, r, i), the q blocks of the group's heads stream past.
    def q_index(b, g, j, r, i):
        if causal:  # before the first q block that sees kv block j: stay put (no new DMA)
            first = causal_skipping.first_q_block(j, block_q=block_q, block_kv=block_kv)
            i = jnp.minimum(jnp.maximum(i, first), n_q - 1)
        return b, g * group + r, i

    kv_block = pl.BlockSpec((None, None, block_kv, head_dim), lambda b, g, j, r, i: (b, g, j, 0))
    q_block = pl.BlockSpec((None, None, block_q, head_dim), lambda *ids: (*q_index(*ids), 0))
    q_stat = pl.BlockSpec((None, None, 1, block_q),
                          lambda *ids: (*q_index(*ids)[:2], 0, q_index(*ids)[2]))
    dk, dv = pl.pallas_call(
        functools.partial(dkv_kernel, **params),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        grid=(batch, kv_heads, n_kv, group, n_q),
        in_specs=[q_block, kv_block, kv_block, q_block, q_stat, q_stat],
        out_specs=(kv_block, kv_block),
        scratch_shapes=[pltpu.VMEM((block_kv, head_dim), jnp.float32),
                        pltpu.VMEM((block_kv, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary", "arbitrary")),
    )(q, k, v, do, lse2, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _attention(q, k, v, causal, scale, block_q, block_kv):
    out, _ = forward.flash_forward(q, k, v, causal=causal, scale=scale, block_q=block_q,
                                   block_kv=block_kv)
    return out


def _attention_fwd(q, k, v, causal, scale, block_q, block_kv):
    out, lse = forward.flash_forward(q, k, v, causal=causal, scale=scale, block_q=block_q,
                                     block_kv=block_kv)
    return out, (q, k, v, out, lse)


def _attention_bwd(causal, scale, block_q, block_kv, residuals, do):
    q, k, v, out, lse = residuals
    return flash_backward(q, k, v, out, lse, do, causal=causal, scale=scale,
                          block_q=block_q, block_kv=block_kv)


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                    scale: float | None = None, block_q: int = 512,
                    block_kv: int = 2048) -> jax.Array:
    """Attention out (B, H, Sq, D), differentiable through the Pallas backward kernels."""
    return _attention(q, k, v, causal, scale, block_q, block_kv)
