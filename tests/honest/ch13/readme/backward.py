"""Exercise ch13.backward: a custom_vjp whose bwd rule runs a dq kernel and a dk/dv kernel,
recomputing P = exp(S - lse) block by block (the README's "The backward, derived")."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, forward, gqa

NT = (((1,), (1,)), ((), ()))  # contract the D axes: q kᵀ without a transpose
TN = (((0,), (0,)), ((), ()))  # contract the row axes: Pᵀ dO


def _scores(q, k, i, j, *, causal, scale, block_q, block_kv):
    s = jax.lax.dot_general(q, k, NT, preferred_element_type=jnp.float32) * scale
    if causal:
        rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
        cols = j * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
        s = jnp.where(rows >= cols, s, -jnp.inf)
    return s


def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, acc_ref, *,
              causal, scale, block_q, block_kv):
    i = pl.program_id(2)
    j = pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def _step():
        k = k_ref[...]
        s = _scores(q_ref[...], k, i, j, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)
        p = jnp.exp(s - lse_ref[...])
        dp = jax.lax.dot_general(do_ref[...], v_ref[...], NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        acc_ref[...] += jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32)

    if causal:
        pl.when(j <= causal_skipping.last_kv_block(i, block_q=block_q, block_kv=block_kv))(_step)
    else:
        _step()

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        dq_ref[...] = (acc_ref[...] * scale).astype(dq_ref.dtype)


def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_acc, dv_acc, *,
               causal, scale, block_q, block_kv):
    j = pl.program_id(2)
    r = pl.program_id(3)
    i = pl.program_id(4)

    @pl.when((r == 0) & (i == 0))
    def _init():
        dk_acc[...] = jnp.zeros_like(dk_acc)
        dv_acc[...] = jnp.zeros_like(dv_acc)

    def _step():
        q = q_ref[...]
        do = do_ref[...]
        s = _scores(q, k_ref[...], i, j, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)
        p = jnp.exp(s - lse_ref[...])
        dv_acc[...] += jax.lax.dot_general(p.astype(do.dtype), do, TN, preferred_element_type=jnp.float32)
        dp = jax.lax.dot_general(do, v_ref[...], NT, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_ref[...])
        dk_acc[...] += jax.lax.dot_general(ds.astype(q.dtype), q, TN, preferred_element_type=jnp.float32)

    if causal:
        pl.when(i >= causal_skipping.first_q_block(j, block_q=block_q, block_kv=block_kv))(_step)
    else:
        _step()

    @pl.when((r == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def _flush():
        dk_ref[...] = (dk_acc[...] * scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _backward(q, k, v, out, lse, do, *, causal, scale, block_q, block_kv):
    b, h, sq, d = q.shape
    _, hkv, skv, _ = k.shape
    group = h // hkv
    nq, nk = sq // block_q, skv // block_kv
    delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    lse4, delta4 = lse[..., None], delta[..., None]
    opts = dict(causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)

    # dq: the forward's grid; q, dO, lse, delta and dq resident, k and v streaming past.
    def kv_index(b, h, i, j):
        if causal:
            j = jnp.minimum(j, causal_skipping.last_kv_block(i, block_q=block_q, block_kv=block_kv))
        return (b, gqa.kv_head(h, group=group), j, 0)

    q_block = pl.BlockSpec((None, None, block_q, d), lambda b, h, i, j: (b, h, i, 0))
    row_block = pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, j: (b, h, i, 0))
    kv_block = pl.BlockSpec((None, None, block_kv, d), kv_index)
    dq = pl.pallas_call(
        functools.partial(dq_kernel, **opts),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(b, h, nq, nk),
        in_specs=[q_block, kv_block, kv_block, q_block, row_block, row_block],
        out_specs=q_block,
        scratch_shapes=[pltpu.VMEM((block_q, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v, do, lse4, delta4)

    # dk/dv: k, v, dk and dv resident; every q block of every head of the group streams past.
    def q_index(b, g, j, r, i):
        if causal:
            first = causal_skipping.first_q_block(j, block_q=block_q, block_kv=block_kv)
            i = jnp.minimum(jnp.maximum(i, first), nq - 1)
        return (b, g * group + r, i, 0)

    q_side = pl.BlockSpec((None, None, block_q, d), q_index)
    q_rows = pl.BlockSpec((None, None, block_q, 1), q_index)
    kv_side = pl.BlockSpec((None, None, block_kv, d), lambda b, g, j, r, i: (b, g, j, 0))
    dk, dv = pl.pallas_call(
        functools.partial(dkv_kernel, **opts),
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        grid=(b, hkv, nk, group, nq),
        in_specs=[q_side, kv_side, kv_side, q_side, q_rows, q_rows],
        out_specs=[kv_side, kv_side],
        scratch_shapes=[pltpu.VMEM((block_kv, d), jnp.float32), pltpu.VMEM((block_kv, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary", "arbitrary")),
    )(q, k, v, do, lse4, delta4)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _flash(q, k, v, causal, scale, block_q, block_kv):
    out, _ = forward.flash_forward(q, k, v, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)
    return out


def _flash_fwd(q, k, v, causal, scale, block_q, block_kv):
    out, lse = forward.flash_forward(q, k, v, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)
    return out, (q, k, v, out, lse)


def _flash_bwd(causal, scale, block_q, block_kv, residuals, do):
    q, k, v, out, lse = residuals
    return _backward(q, k, v, out, lse, do, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)


_flash.defvjp(_flash_fwd, _flash_bwd)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                    scale: float | None = None, block_q: int = 128,
                    block_kv: int = 128) -> jax.Array:
    """Attention out (B, H, Sq, D), differentiable through the Pallas backward kernels."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    block_q, block_kv = min(block_q, q.shape[2]), min(block_kv, k.shape[2])
    return _flash(q, k, v, causal, float(scale), block_q, block_kv)
