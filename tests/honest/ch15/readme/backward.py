"""Exercise ch15.backward: chapter 13's two backward kernels, each walking its band."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import autotune, band, forward
from .forward import BlockSizes

NT = (((1,), (1,)), ((), ()))
TN = (((0,), (0,)), ((), ()))


def _p(q, k, lse, i, j, *, scale, window, block_q, block_kv):
    s = jax.lax.dot_general(q, k, NT, preferred_element_type=jnp.float32) * scale
    s = forward.window_mask(s, i, j, window=window, block_q=block_q, block_kv=block_kv)
    return jnp.exp(s - lse)


def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, acc_ref, *, scale, window, sizes):
    i = pl.program_id(2)
    t = pl.program_id(3)
    j, in_band = band.at_step(band.kv_blocks, i, t, **sizes)

    @pl.when(t == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(in_band)
    def _step():
        k = k_ref[...]
        p = _p(q_ref[...], k, lse_ref[...], i, j, scale=scale, window=window, block_q=sizes["block_q"],
               block_kv=sizes["block_kv"])
        dp = jax.lax.dot_general(do_ref[...], v_ref[...], NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        dq_ref[...] = (acc_ref[...] * scale).astype(dq_ref.dtype)


def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_acc, dv_acc, *,
               scale, window, sizes):
    j = pl.program_id(2)
    t = pl.program_id(3)
    i, in_band = band.at_step(band.q_blocks, j, t, **sizes)

    @pl.when(t == 0)
    def _init():
        dk_acc[...] = jnp.zeros_like(dk_acc)
        dv_acc[...] = jnp.zeros_like(dv_acc)

    @pl.when(in_band)
    def _step():
        q = q_ref[...]
        do = do_ref[...]
        p = _p(q, k_ref[...], lse_ref[...], i, j, scale=scale, window=window, block_q=sizes["block_q"],
               block_kv=sizes["block_kv"])
        dv_acc[...] += jax.lax.dot_general(p.astype(do.dtype), do, TN, preferred_element_type=jnp.float32)
        dp = jax.lax.dot_general(do, v_ref[...], NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dk_acc[...] += jax.lax.dot_general(ds.astype(q.dtype), q, TN, preferred_element_type=jnp.float32)

    @pl.when(t == pl.num_programs(3) - 1)
    def _flush():
        dk_ref[...] = (dk_acc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _backward(q, k, v, out, lse, do, *, window, scale, blocks):
    b, h, sq, d = q.shape
    skv = k.shape[2]
    block_q, block_kv = min(blocks.block_q, sq), min(blocks.block_kv, skv)
    nq, nk = sq // block_q, skv // block_kv
    delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1, keepdims=True)
    lse = lse[..., None]

    kv_sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=nk)
    q_resident = pl.BlockSpec((None, None, block_q, d), lambda b, h, i, t: (b, h, i, 0))
    rows_resident = pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, t: (b, h, i, 0))
    kv_streaming = pl.BlockSpec(
        (None, None, block_kv, d), lambda b, h, i, t: (b, h, band.clamped(band.kv_blocks, i, t, **kv_sizes), 0))
    dq = pl.pallas_call(
        functools.partial(dq_kernel, scale=scale, window=window, sizes=kv_sizes),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(b, h, nq, band.widest(band.kv_blocks, nq, **kv_sizes)),
        in_specs=[q_resident, kv_streaming, kv_streaming, q_resident, rows_resident, rows_resident],
        out_specs=q_resident,
        scratch_shapes=[pltpu.VMEM((block_q, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse, delta)

    q_sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_q_blocks=nq)

    def q_index(b, h, j, t):
        return (b, h, band.clamped(band.q_blocks, j, t, **q_sizes), 0)

    kv_resident = pl.BlockSpec((None, None, block_kv, d), lambda b, h, j, t: (b, h, j, 0))
    q_streaming = pl.BlockSpec((None, None, block_q, d), q_index)
    rows_streaming = pl.BlockSpec((None, None, block_q, 1), q_index)
    dk, dv = pl.pallas_call(
        functools.partial(dkv_kernel, scale=scale, window=window, sizes=q_sizes),
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        grid=(b, h, nk, band.widest(band.q_blocks, nk, **q_sizes)),
        in_specs=[q_streaming, kv_resident, kv_resident, q_streaming, rows_streaming, rows_streaming],
        out_specs=[kv_resident, kv_resident],
        scratch_shapes=[pltpu.VMEM((block_kv, d), jnp.float32), pltpu.VMEM((block_kv, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attention(q, k, v, window, scale, blocks):
    out, _ = forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)
    return out


def _attention_fwd(q, k, v, window, scale, blocks):
    out, lse = forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)
    return out, (q, k, v, out, lse)


def _attention_bwd(window, scale, blocks, residuals, do):
    q, k, v, out, lse = residuals
    return _backward(q, k, v, out, lse, do, window=window, scale=scale, blocks=blocks)


_attention.defvjp(_attention_fwd, _attention_bwd)


def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                     scale: float | None = None, blocks: BlockSizes | None = None) -> jax.Array:
    """Sliding-window attention out (B, H, Sq, D), differentiable through the Pallas backward."""
    if blocks is None:
        tuned = autotune.tuned_blocks(q.shape, k.shape, q.dtype, window)
        blocks = BlockSizes(**tuned) if tuned else BlockSizes()
    if scale is None:
        scale = q.shape[-1] ** -0.5
    return _attention(q, k, v, window, float(scale), blocks)
