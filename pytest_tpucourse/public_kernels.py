"""JAX's shipped Pallas TPU kernels (the public ceiling), in the course's signatures.

`jax.experimental.pallas.ops.tpu` is the best public kernel for each op the
course grades; gates time learner kernels against it, and the checker is shown
to accept it (tests/test_tolerance_rule.py). The wrappers only adapt arguments:
attention takes q (B, H, Sq, D), k and v (B, H, Skv, D) with the course's
default scale 1/sqrt(D), and a causal mask aligned top-left.
"""

from __future__ import annotations

import functools

import jax


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                    block: int = 128):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    sizes = fa.BlockSizes(
        block_q=block, block_k_major=block, block_k=block, block_b=1,
        block_q_major_dkv=block, block_k_major_dkv=block, block_k_dkv=block, block_q_dkv=block,
        block_k_major_dq=block, block_k_dq=block, block_q_dq=block,
    )
    return fa.flash_attention(q, k, v, causal=causal, sm_scale=scale, block_sizes=sizes)


@functools.lru_cache(maxsize=None)
def _splash_kernel(heads: int, q_len: int, kv_len: int, causal: bool, block: int):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    shape = (q_len, kv_len)
    head_mask = sm.CausalMask(shape) if causal else sm.FullMask(shape)
    sizes = sk.BlockSizes(
        block_q=block, block_kv=block, block_kv_compute=block,
        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
        block_q_dq=block, block_kv_dq=block,
    )
    # The kernel holds its mask tables as arrays; built under a trace they would
    # be tracers, and this cache would leak them into the next trace.
    with jax.ensure_compile_time_eval():
        return sk.make_splash_mha(sm.MultiHeadMask([head_mask] * heads), block_sizes=sizes,
                                  head_shards=1, q_seq_shards=1)


def splash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                     block: int = 128):
    """Splash attention (multi-head; it does not scale q itself, so the wrapper does)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    kernel = _splash_kernel(q.shape[1], q.shape[2], k.shape[2], causal, block)
    return jax.vmap(kernel)((q * scale).astype(q.dtype), k, v)


def matmul(x, y, *, bm: int = 128, bk: int = 128, bn: int = 128):
    from jax.experimental.pallas.ops.tpu import matmul as mm

    return mm.matmul(x, y, block_shape=(bm, bn), block_k=bk)
