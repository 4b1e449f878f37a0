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

P and dS are rounded to the input dtype before their matmuls (the MXU's bf16 inputs);
every product accumulates in f32.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, forward

NEG_INF = float("-inf")


def _probabilities(q, k, lse, *, scale, causal, q_start, kv_start):
    """P for one (q block, kv block) pair, recomputed from the saved logsumexp."""
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32) * scale
    if causal:
        rows = q_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = kv_start + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(rows >= cols, s, NEG_INF)
    return jnp.exp(s - lse)


def _ds(p, do, v, delta):
    """dS = P ∘ (dO Vᵀ - Δ)."""
    dp = jax.lax.dot_general(do, v, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    return p * (dp - delta)


def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, acc_ref, *,
              causal: bool, scale: float, block_q: int, block_kv: int):
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def step():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        p = _probabilities(q, k, lse_ref[...], scale=scale, causal=causal,
                           q_start=i * block_q, kv_start=j * block_kv)
        ds = _ds(p, do, v, delta_ref[...])
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    forward.unless_above_diagonal(step, i, j, causal=causal, block_q=block_q, block_kv=block_kv)

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        dq_ref[...] = (acc_ref[...] * scale).astype(dq_ref.dtype)


def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref,
               dk_acc, dv_acc, *, causal: bool, scale: float, block_q: int, block_kv: int):
    j, r, i = pl.program_id(2), pl.program_id(3), pl.program_id(4)

    @pl.when((r == 0) & (i == 0))
    def _init():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    def step():
        q, k, v, do = q_ref[...], k_ref[...], v_ref[...], do_ref[...]
        p = _probabilities(q, k, lse_ref[...], scale=scale, causal=causal,
                           q_start=i * block_q, kv_start=j * block_kv)
        # dV += Pᵀ dO, dK += dSᵀ Q (contracting the q rows).
        dv_acc[...] += jax.lax.dot_general(p.astype(do.dtype), do, (((0,), (0,)), ((), ())),
                                           preferred_element_type=jnp.float32)
        ds = _ds(p, do, v, delta_ref[...])
        dk_acc[...] += jax.lax.dot_general(ds.astype(q.dtype), q, (((0,), (0,)), ((), ())),
                                           preferred_element_type=jnp.float32)

    if causal:
        pl.when(i >= causal_skipping.first_q_block(j, block_q=block_q, block_kv=block_kv))(step)
    else:
        step()

    @pl.when((r == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def _flush():
        dk_ref[...] = (dk_acc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def flash_backward(q, k, v, out, lse, do, *, causal: bool = False, scale: float | None = None,
                   block_q: int = 128, block_kv: int = 128):
    """(dq, dk, dv) of attention at (q, k, v), given the forward's out and lse."""
    batch, heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    block_q, block_kv = forward.check_blocks(q, k, block_q, block_kv)
    scale = head_dim ** -0.5 if scale is None else scale
    group = heads // kv_heads
    n_q, n_kv = q_len // block_q, kv_len // block_kv
    delta = jnp.sum(out.astype(jnp.float32) * do.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]
    params = dict(causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)

    # dq: grid (b, h, i, j), kv blocks stream past a resident q block, skipped as in the forward.
    kv_index = forward.kv_index_map(causal=causal, block_q=block_q, block_kv=block_kv,
                                    num_kv_blocks=n_kv, group=group)
    q_rows = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0))
    row_stat = pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, j: (b, h, i, 0))
    kv_rows = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
    dq = pl.pallas_call(
        functools.partial(dq_kernel, **params),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(batch, heads, n_q, n_kv),
        in_specs=[q_rows, kv_rows, kv_rows, q_rows, row_stat, row_stat],
        out_specs=q_rows,
        scratch_shapes=[pltpu.VMEM((block_q, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse, delta)

    # dk, dv: grid (b, g, j, r, i), the q blocks of the group's heads stream past.
    def q_index(b, g, j, r, i):
        if causal:  # before the first q block that sees kv block j: stay put (no new DMA)
            first = causal_skipping.first_q_block(j, block_q=block_q, block_kv=block_kv)
            i = jnp.minimum(jnp.maximum(i, first), n_q - 1)
        return b, g * group + r, i, 0

    kv_block = pl.BlockSpec((None, None, block_kv, head_dim), lambda b, g, j, r, i: (b, g, j, 0))
    q_block = pl.BlockSpec((None, None, block_q, head_dim), q_index)
    q_stat = pl.BlockSpec((None, None, block_q, 1), q_index)
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
    )(q, k, v, do, lse, delta)
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
                    scale: float | None = None, block_q: int = 128,
                    block_kv: int = 128) -> jax.Array:
    """Attention out (B, H, Sq, D), differentiable through the Pallas backward kernels."""
    return _attention(q, k, v, causal, scale, block_q, block_kv)
