"""Exercise ch15.forward: sliding-window flash attention; the grid's last axis is the band."""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import band


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Rows of q and keys of k, v per grid step (both multiples of 8, or the whole length)."""

    block_q: int = 128
    block_kv: int = 128


def allowed(shape, q_block, kv_block, *, block_q, block_kv, window):
    """Which (row, key) pairs of a tile the window lets through: r - window < c <= r."""
    row = q_block * block_q + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    key = kv_block * block_kv + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    return (key <= row) & (row - key < window)


def geometry(q, k, window, blocks):
    """The clamped block sizes and the band's arguments, after refusing what the kernel cannot do."""
    q_len, kv_len = q.shape[2], k.shape[2]
    if window < 1:
        raise ValueError(f"window must be at least 1 key, got {window}")
    if q_len > kv_len:
        raise ValueError(f"q length {q_len} exceeds kv length {kv_len}: rows past the last key see nothing")
    block_q, block_kv = min(blocks.block_q, q_len), min(blocks.block_kv, kv_len)
    for name, length, block in (("q", q_len, block_q), ("kv", kv_len, block_kv)):
        if length % block:
            raise ValueError(f"{name} length {length} is not a multiple of its block {block}")
    return dict(block_q=block_q, block_kv=block_kv, window=window), q_len // block_q, kv_len // block_kv


def window_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, window: int,
                   scale: float | None = None,
                   blocks: BlockSizes = BlockSizes()) -> tuple[jax.Array, jax.Array]:
    """(out, lse) of sliding-window attention."""
    batch, heads, q_len, dim = q.shape
    scale = dim ** -0.5 if scale is None else scale
    tile, n_q, n_kv = geometry(q, k, window, blocks)
    sizes = dict(tile, num_kv_blocks=n_kv)
    band_steps = band.widest(band.kv_blocks, n_q, **sizes)

    def kernel(q_ref, k_ref, v_ref, out_ref, lse_ref, run_max, run_sum, acc):
        qi, step = pl.program_id(2), pl.program_id(3)
        kj, inside = band.at_step(band.kv_blocks, qi, step, **sizes)

        @pl.when(step == 0)
        def _start():
            run_max[...] = jnp.full(run_max.shape, -jnp.inf, jnp.float32)
            run_sum[...] = jnp.zeros(run_sum.shape, jnp.float32)
            acc[...] = jnp.zeros(acc.shape, jnp.float32)

        @pl.when(inside)
        def _accumulate():
            v = v_ref[...]
            scores = scale * jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                                                 preferred_element_type=jnp.float32)
            scores = jnp.where(allowed(scores.shape, qi, kj, **tile), scores, -jnp.inf)
            new_max = jnp.maximum(run_max[...], scores.max(axis=-1, keepdims=True))
            pivot = jnp.where(jnp.isfinite(new_max), new_max, 0.0)  # a row that sees no key yet
            weights = jnp.exp(scores - pivot)
            decay = jnp.exp(run_max[...] - pivot)
            run_sum[...] = decay * run_sum[...] + weights.sum(axis=-1, keepdims=True)
            acc[...] = decay * acc[...] + jnp.dot(weights.astype(v.dtype), v, preferred_element_type=jnp.float32)
            run_max[...] = new_max

        @pl.when(step == band_steps - 1)
        def _finish():
            out_ref[...] = (acc[...] / run_sum[...]).astype(out_ref.dtype)
            lse_ref[...] = run_max[...] + jnp.log(run_sum[...])

    def by_q(b, h, qi, step):
        return b, h, qi, 0

    def by_band(b, h, qi, step):
        return b, h, band.clamped(band.kv_blocks, qi, step, **sizes), 0

    bq, bkv = tile["block_q"], tile["block_kv"]
    out, lse = pl.pallas_call(
        kernel,
        grid=(batch, heads, n_q, band_steps),
        in_specs=[pl.BlockSpec((None, None, bq, dim), by_q),
                  pl.BlockSpec((None, None, bkv, dim), by_band),
                  pl.BlockSpec((None, None, bkv, dim), by_band)],
        out_specs=(pl.BlockSpec((None, None, bq, dim), by_q), pl.BlockSpec((None, None, bq, 1), by_q)),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, q_len, 1), jnp.float32)),
        scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                        pltpu.VMEM((bq, dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, jnp.reshape(lse, (batch, heads, q_len))
