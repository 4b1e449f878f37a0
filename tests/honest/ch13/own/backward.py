"""Exercise ch13.backward: flash attention differentiable through two Pallas kernels.

The bwd rule recomputes P = exp(S - lse) inside each kernel, from the saved logsumexp:
the dq kernel keeps a q block's dq while kv blocks stream past; the dk/dv kernel keeps a
kv block's dk and dv while the q blocks of every head of its group stream past.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, forward, gqa


class Config(NamedTuple):
    """What the kernels are specialised on (hashable: custom_vjp's non-differentiable argument)."""

    causal: bool
    scale: float
    block_q: int
    block_kv: int


def _contract(a, b, axis):
    """a and b contracted over `axis` of both (1: a bᵀ, 0: aᵀ b), accumulated in f32."""
    return jax.lax.dot_general(a, b, (((axis,), (axis,)), ((), ())), preferred_element_type=jnp.float32)


def _probabilities(q, k, lse, q_block, kv_block, cfg):
    scores = _contract(q, k, 1) * cfg.scale
    if cfg.causal:
        row = q_block * cfg.block_q + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
        col = kv_block * cfg.block_kv + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
        scores = jnp.where(col <= row, scores, -jnp.inf)
    return jnp.exp(scores - lse)


def _run_if(condition, causal, body):
    if causal:
        pl.when(condition)(body)
    else:
        body()


def _dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_acc, *, cfg):
    qi, kj = pl.program_id(2), pl.program_id(3)

    @pl.when(kj == 0)
    def _zero():
        dq_acc[...] = jnp.zeros(dq_acc.shape, jnp.float32)

    def accumulate():
        k = k_ref[...]
        p = _probabilities(q_ref[...], k, lse_ref[...], qi, kj, cfg)
        ds = p * (_contract(do_ref[...], v_ref[...], 1) - delta_ref[...])
        dq_acc[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    last_needed = causal_skipping.last_kv_block(qi, block_q=cfg.block_q, block_kv=cfg.block_kv)
    _run_if(kj <= last_needed, cfg.causal, accumulate)

    @pl.when(kj == pl.num_programs(3) - 1)
    def _store():
        dq_ref[...] = (cfg.scale * dq_acc[...]).astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_acc, dv_acc, *, cfg):
    kj, member, qi = pl.program_id(2), pl.program_id(3), pl.program_id(4)
    first_pair = (member == 0) & (qi == 0)
    last_pair = (member == pl.num_programs(3) - 1) & (qi == pl.num_programs(4) - 1)

    @pl.when(first_pair)
    def _zero():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    def accumulate():
        q, do = q_ref[...], do_ref[...]
        p = _probabilities(q, k_ref[...], lse_ref[...], qi, kj, cfg)
        dv_acc[...] += _contract(p.astype(do.dtype), do, 0)
        ds = p * (_contract(do, v_ref[...], 1) - delta_ref[...])
        dk_acc[...] += _contract(ds.astype(q.dtype), q, 0)

    first_needed = causal_skipping.first_q_block(kj, block_q=cfg.block_q, block_kv=cfg.block_kv)
    _run_if(qi >= first_needed, cfg.causal, accumulate)

    @pl.when(last_pair)
    def _store():
        dk_ref[...] = (cfg.scale * dk_acc[...]).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _gradients(cfg: Config, q, k, v, out, lse, do):
    batch, heads, q_len, dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    bq, bkv = cfg.block_q, cfg.block_kv
    group, n_q, n_kv = heads // kv_heads, q_len // bq, kv_len // bkv
    delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]

    def streamed_kv(b, h, qi, kj):
        if cfg.causal:
            kj = jnp.minimum(kj, causal_skipping.last_kv_block(qi, block_q=bq, block_kv=bkv))
        return b, gqa.kv_head(h, group=group), kj, 0

    def resident_q(b, h, qi, kj):
        return b, h, qi, 0

    dq = pl.pallas_call(
        functools.partial(_dq_kernel, cfg=cfg),
        grid=(batch, heads, n_q, n_kv),
        in_specs=[pl.BlockSpec((None, None, bq, dim), resident_q),
                  pl.BlockSpec((None, None, bkv, dim), streamed_kv),
                  pl.BlockSpec((None, None, bkv, dim), streamed_kv),
                  pl.BlockSpec((None, None, bq, dim), resident_q),
                  pl.BlockSpec((None, None, bq, 1), resident_q),
                  pl.BlockSpec((None, None, bq, 1), resident_q)],
        out_specs=pl.BlockSpec((None, None, bq, dim), resident_q),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((bq, dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse, delta)

    def streamed_q(b, g, kj, member, qi):
        if cfg.causal:
            start = causal_skipping.first_q_block(kj, block_q=bq, block_kv=bkv)
            qi = jnp.minimum(jnp.maximum(qi, start), n_q - 1)
        return b, g * group + member, qi, 0

    def resident_kv(b, g, kj, member, qi):
        return b, g, kj, 0

    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, cfg=cfg),
        grid=(batch, kv_heads, n_kv, group, n_q),
        in_specs=[pl.BlockSpec((None, None, bq, dim), streamed_q),
                  pl.BlockSpec((None, None, bkv, dim), resident_kv),
                  pl.BlockSpec((None, None, bkv, dim), resident_kv),
                  pl.BlockSpec((None, None, bq, dim), streamed_q),
                  pl.BlockSpec((None, None, bq, 1), streamed_q),
                  pl.BlockSpec((None, None, bq, 1), streamed_q)],
        out_specs=(pl.BlockSpec((None, None, bkv, dim), resident_kv),
                   pl.BlockSpec((None, None, bkv, dim), resident_kv)),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        scratch_shapes=[pltpu.VMEM((bkv, dim), jnp.float32), pltpu.VMEM((bkv, dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary", "arbitrary")),
    )(q, k, v, do, lse, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(cfg, q, k, v):
    return forward.flash_forward(q, k, v, **cfg._asdict())[0]


def _attention_fwd(cfg, q, k, v):
    out, lse = forward.flash_forward(q, k, v, **cfg._asdict())
    return out, (q, k, v, out, lse)


def _attention_bwd(cfg, saved, do):
    return _gradients(cfg, *saved, do)


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                    scale: float | None = None, block_q: int = 128,
                    block_kv: int = 128) -> jax.Array:
    """softmax(q kᵀ · scale) v, with dq, dk, dv from the Pallas kernels above."""
    cfg = Config(causal=bool(causal), scale=float(q.shape[-1] ** -0.5 if scale is None else scale),
                 block_q=min(block_q, q.shape[2]), block_kv=min(block_kv, k.shape[2]))
    return _attention(cfg, q, k, v)
