"""JAX's shipped Pallas TPU kernels (the public ceiling), in the course's signatures.

`jax.experimental.pallas.ops.tpu` is the best public kernel for each op the
course grades; gates time learner kernels against it, and the checker is shown
to accept it (tests/test_tolerance.py). The wrappers only adapt arguments:
attention takes q (B, H, Sq, D), k and v (B, H, Skv, D) with the course's
default scale 1/sqrt(D), and a causal mask aligned top-left.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax

from .core import jax_internals

__all__ = [
    "course_solution", "flash_attention", "flash_forward", "matmul", "splash_attention",
]


def _flash_block_sizes(block_q: int, block_kv: int):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    return fa.BlockSizes(
        block_q=block_q, block_k_major=block_kv, block_k=block_kv, block_b=1,
        block_q_major_dkv=block_q, block_k_major_dkv=block_kv, block_k_dkv=block_kv,
        block_q_dkv=block_q, block_k_major_dq=block_kv, block_k_dq=block_kv, block_q_dq=block_q,
    )


def _shared_kv_heads(q, k, v):
    """JAX's kernels are multi-head only: give each query head its kv head (GQA, MQA)."""
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return k, v
    return jax.numpy.repeat(k, group, axis=1), jax.numpy.repeat(v, group, axis=1)


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                    block_q: int = 128, block_kv: int = 128):
    """JAX's flash attention, forward and backward (its own custom_vjp)."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = _shared_kv_heads(q, k, v)
    block_q, block_kv = min(block_q, q.shape[2]), min(block_kv, k.shape[2])
    return fa.flash_attention(q, k, v, causal=causal, sm_scale=scale,
                              block_sizes=_flash_block_sizes(block_q, block_kv))


def flash_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                  block_q: int = 128, block_kv: int = 128):
    """(out, lse) from JAX's flash forward kernel, in chapter 13's signature.

    The kernel saves the rows' normaliser l and max m when asked for residuals;
    lse = m + log(l) (jax_internals: only a private entry point returns them).
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = _shared_kv_heads(q, k, v)
    block_q, block_kv = min(block_q, q.shape[2]), min(block_kv, k.shape[2])
    out, l, m = jax_internals.flash_attention_with_residuals(q, k, v, causal=causal, scale=scale,
                                                            block_q=block_q, block_kv=block_kv)
    if l.ndim == q.ndim:  # lane-replicated (B, H, Sq, 128)
        l, m = l[..., 0], m[..., 0]
    return out, m + jax.numpy.log(l)


@functools.lru_cache(maxsize=None)
def _splash_kernel(heads: int, q_len: int, kv_len: int, causal: bool, block: int,
                   window: int | None = None):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    shape = (q_len, kv_len)
    if window is not None:  # query r sees keys r - window < c <= r
        head_mask = sm.LocalMask(shape, window_size=(window - 1, 0), offset=0)
    else:
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
                     block: int = 128, window: int | None = None):
    """Splash attention (it takes no softmax scale: the wrapper scales q). window: its local
    mask, each query seeing its own key and the window - 1 before it (causal implied)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = _shared_kv_heads(q, k, v)
    kernel = _splash_kernel(q.shape[1], q.shape[2], k.shape[2], causal, block, window)
    dtype = q.dtype
    # Scaled in f32: rounding q·scale back to bf16 would add an error of its own wherever
    # the scale is not a power of two (the kernel takes mixed f32 q and bf16 k, v).
    q = q.astype(jax.numpy.float32) * scale
    # One call per batch element, not jax.vmap: vmap adds a grid axis that TPU interpret
    # mode (jax 0.10.2) does not give a dimension semantic, and batches over 1 fail there.
    return jax.numpy.stack([kernel(q[b], k[b], v[b]) for b in range(q.shape[0])]).astype(dtype)


def matmul(x, y, *, bm: int = 128, bk: int = 128, bn: int = 128):
    from jax.experimental.pallas.ops.tpu import matmul as mm

    return mm.matmul(x, y, block_shape=(bm, bn), block_k=bk)


def course_solution(near, name: str):
    """A function of the course's shipped solutions, `name` = "ch11.matmul.matmul": reading material
    for a chapter that studies another chapter's kernels. `near`: any path inside the course."""
    from .core.course import find_course_root, load_course
    from .grading.tree import GradedTree, Implementation

    root = find_course_root(Path(near).resolve())
    if root is None:
        raise FileNotFoundError(f"no course checkout (course.toml) at or above {near}")
    chapter, module, function = name.split(".")
    solutions = Implementation(GradedTree("solutions", root / "solutions"), load_course(root), chapter)
    return getattr(getattr(solutions, module), function).resolve()
