"""Exercise ch15.backward: the window's gradient from two Pallas kernels, each over its band."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import autotune, band, forward
from .forward import BlockSizes


def _matmul(a, b, contract_a, contract_b):
    return jax.lax.dot_general(a, b, (((contract_a,), (contract_b,)), ((), ())),
                               preferred_element_type=jnp.float32)


def _recomputed(q, k, lse, delta, do, v, qi, kj, tile, scale):
    """(P, dS) of one tile, from the saved logsumexp: the window masked as the forward masks it."""
    scores = scale * _matmul(q, k, 1, 1)
    scores = jnp.where(forward.allowed(scores.shape, qi, kj, **tile), scores, -jnp.inf)
    p = jnp.exp(scores - lse)
    return p, p * (_matmul(do, v, 1, 1) - delta)


def _gradients(window, scale, blocks, saved, do):
    q, k, v, out, lse = saved
    batch, heads, q_len, dim = q.shape
    tile, n_q, n_kv = forward.geometry(q, k, window, blocks)
    bq, bkv = tile["block_q"], tile["block_kv"]
    delta = (do.astype(jnp.float32) * out.astype(jnp.float32)).sum(axis=-1)[..., None]
    lse = lse[..., None]
    kv_band = dict(tile, num_kv_blocks=n_kv)
    q_band = dict(tile, num_q_blocks=n_q)
    kv_steps = band.widest(band.kv_blocks, n_q, **kv_band)
    q_steps = band.widest(band.q_blocks, n_kv, **q_band)
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))

    def dq_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dq_ref, dq_sum):
        qi, step = pl.program_id(2), pl.program_id(3)
        kj, inside = band.at_step(band.kv_blocks, qi, step, **kv_band)

        @pl.when(step == 0)
        def _start():
            dq_sum[...] = jnp.zeros(dq_sum.shape, jnp.float32)

        @pl.when(inside)
        def _accumulate():
            k_tile = k_ref[...]
            _, ds = _recomputed(q_ref[...], k_tile, lse_ref[...], delta_ref[...], do_ref[...], v_ref[...],
                                qi, kj, tile, scale)
            dq_sum[...] += jnp.dot(ds.astype(k_tile.dtype), k_tile, preferred_element_type=jnp.float32)

        @pl.when(step == kv_steps - 1)
        def _finish():
            dq_ref[...] = (scale * dq_sum[...]).astype(dq_ref.dtype)

    def dkv_kernel(q_ref, k_ref, v_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_sum, dv_sum):
        kj, step = pl.program_id(2), pl.program_id(3)
        qi, inside = band.at_step(band.q_blocks, kj, step, **q_band)

        @pl.when(step == 0)
        def _start():
            dk_sum[...] = jnp.zeros(dk_sum.shape, jnp.float32)
            dv_sum[...] = jnp.zeros(dv_sum.shape, jnp.float32)

        @pl.when(inside)
        def _accumulate():
            q_tile, do_tile = q_ref[...], do_ref[...]
            p, ds = _recomputed(q_tile, k_ref[...], lse_ref[...], delta_ref[...], do_tile, v_ref[...],
                                qi, kj, tile, scale)
            dv_sum[...] += _matmul(p.astype(do_tile.dtype), do_tile, 0, 0)
            dk_sum[...] += _matmul(ds.astype(q_tile.dtype), q_tile, 0, 0)

        @pl.when(step == q_steps - 1)
        def _finish():
            dk_ref[...] = (scale * dk_sum[...]).astype(dk_ref.dtype)
            dv_ref[...] = dv_sum[...].astype(dv_ref.dtype)

    def own_q(b, h, qi, step):
        return b, h, qi, 0

    def band_kv(b, h, qi, step):
        return b, h, band.clamped(band.kv_blocks, qi, step, **kv_band), 0

    dq = pl.pallas_call(
        dq_kernel, grid=(batch, heads, n_q, kv_steps),
        in_specs=[pl.BlockSpec((None, None, bq, dim), own_q), pl.BlockSpec((None, None, bkv, dim), band_kv),
                  pl.BlockSpec((None, None, bkv, dim), band_kv), pl.BlockSpec((None, None, bq, dim), own_q),
                  pl.BlockSpec((None, None, bq, 1), own_q), pl.BlockSpec((None, None, bq, 1), own_q)],
        out_specs=pl.BlockSpec((None, None, bq, dim), own_q),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        scratch_shapes=[pltpu.VMEM((bq, dim), jnp.float32)], compiler_params=params,
    )(q, k, v, do, lse, delta)

    def own_kv(b, h, kj, step):
        return b, h, kj, 0

    def band_q(b, h, kj, step):
        return b, h, band.clamped(band.q_blocks, kj, step, **q_band), 0

    dk, dv = pl.pallas_call(
        dkv_kernel, grid=(batch, heads, n_kv, q_steps),
        in_specs=[pl.BlockSpec((None, None, bq, dim), band_q), pl.BlockSpec((None, None, bkv, dim), own_kv),
                  pl.BlockSpec((None, None, bkv, dim), own_kv), pl.BlockSpec((None, None, bq, dim), band_q),
                  pl.BlockSpec((None, None, bq, 1), band_q), pl.BlockSpec((None, None, bq, 1), band_q)],
        out_specs=(pl.BlockSpec((None, None, bkv, dim), own_kv), pl.BlockSpec((None, None, bkv, dim), own_kv)),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        scratch_shapes=[pltpu.VMEM((bkv, dim), jnp.float32), pltpu.VMEM((bkv, dim), jnp.float32)],
        compiler_params=params,
    )(q, k, v, do, lse, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _window(window, scale, blocks, q, k, v):
    return forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)[0]


def _window_fwd(window, scale, blocks, q, k, v):
    out, lse = forward.window_forward(q, k, v, window=window, scale=scale, blocks=blocks)
    return out, (q, k, v, out, lse)


_window.defvjp(_window_fwd, _gradients)


def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                     scale: float | None = None, blocks: BlockSizes | None = None) -> jax.Array:
    """Sliding-window attention, differentiable through a dq and a dk/dv Pallas kernel."""
    if blocks is None:  # the autotuning cache, read at call time
        tuned = autotune.tuned_blocks(q.shape, k.shape, q.dtype, window)
        blocks = BlockSizes(**tuned) if tuned else BlockSizes()
    scale = float(q.shape[-1] ** -0.5 if scale is None else scale)
    return _window(window, scale, blocks, q, k, v)
