"""Exercise ch13.forward: flash attention's forward, the running max and sum kept 128 lanes
wide as JAX's own kernel keeps them; masked scores are a large negative number."""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, gqa

LANES = 128
MASKED = -1e30  # under top-left causal masking every row sees key 0 in its first kv block


def _online_softmax_kernel(q_ref, k_ref, v_ref, out_ref, lse_ref, max_ref, sum_ref, acc_ref, *,
                           causal, scale, block_q, block_kv):
    qi, kj = pl.program_id(2), pl.program_id(3)
    last = pl.num_programs(3) - 1

    @pl.when(kj == 0)
    def _reset():
        max_ref[...] = jnp.full(max_ref.shape, -jnp.inf, jnp.float32)
        sum_ref[...] = jnp.zeros(sum_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def update():
        v = v_ref[...]
        scores = scale * jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                                             preferred_element_type=jnp.float32)
        if causal:
            row = qi * block_q + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
            col = kj * block_kv + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
            scores = jnp.where(col <= row, scores, MASKED)
        old_max = max_ref[...]
        new_max = jnp.maximum(old_max, scores.max(axis=-1, keepdims=True))
        rescale = jnp.exp(old_max - new_max)
        probs = jnp.exp(scores - new_max[:, :1])
        sum_ref[...] = rescale * sum_ref[...] + probs.sum(axis=-1, keepdims=True)
        acc_ref[...] = rescale[:, :1] * acc_ref[...] + jnp.dot(probs.astype(v.dtype), v,
                                                               preferred_element_type=jnp.float32)
        max_ref[...] = new_max

    if causal:
        needed = kj <= causal_skipping.last_kv_block(qi, block_q=block_q, block_kv=block_kv)
        pl.when(needed)(update)
    else:
        update()

    @pl.when(kj == last)
    def _write():
        total = sum_ref[...][:, :1]
        out_ref[...] = (acc_ref[...] / total).astype(out_ref.dtype)
        lse_ref[...] = max_ref[...][:, :1] + jnp.log(total)


def flash_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                  scale: float | None = None, block_q: int = 128,
                  block_kv: int = 128) -> tuple[jax.Array, jax.Array]:
    """(out, lse) of attention; out in q's dtype, lse float32."""
    batch, heads, q_len, dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    scale = dim ** -0.5 if scale is None else scale
    block_q = min(block_q, q_len)
    block_kv = min(block_kv, kv_len)
    for what, length, block in (("q", q_len, block_q), ("kv", kv_len, block_kv)):
        if length % block != 0:
            raise ValueError(f"flash_forward: {what} length {length} does not divide into blocks of {block}")
    group = heads // kv_heads

    def q_map(b, h, qi, kj):
        return b, h, qi, 0

    def kv_map(b, h, qi, kj):
        block = kj
        if causal:  # past the diagonal the index stays put: nothing more is copied
            block = jnp.minimum(kj, causal_skipping.last_kv_block(qi, block_q=block_q, block_kv=block_kv))
        return b, gqa.kv_head(h, group=group), block, 0

    out, lse = pl.pallas_call(
        functools.partial(_online_softmax_kernel, causal=causal, scale=scale, block_q=block_q,
                          block_kv=block_kv),
        grid=(batch, heads, q_len // block_q, kv_len // block_kv),
        in_specs=[pl.BlockSpec((None, None, block_q, dim), q_map),
                  pl.BlockSpec((None, None, block_kv, dim), kv_map),
                  pl.BlockSpec((None, None, block_kv, dim), kv_map)],
        out_specs=(pl.BlockSpec((None, None, block_q, dim), q_map),
                   pl.BlockSpec((None, None, block_q, 1), q_map)),
        out_shape=(jax.ShapeDtypeStruct((batch, heads, q_len, dim), q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, q_len, 1), jnp.float32)),
        scratch_shapes=[pltpu.VMEM((block_q, LANES), jnp.float32), pltpu.VMEM((block_q, LANES), jnp.float32),
                        pltpu.VMEM((block_q, dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, jnp.squeeze(lse, axis=-1)
