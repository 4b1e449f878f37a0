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
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .core import jax_internals

__all__ = [
    "course_solution", "flash_attention", "flash_forward", "matmul", "plain_flash_forward", "splash_attention",
    "tiled_matmul",
]


def _flash_block_sizes(block_q: int, block_kv: int, block_k: int | None = None, backward=None):
    """JAX flash attention's blocks: block_q queries against block_kv keys a grid step (its block_k_major),
    walked in block_k sub-blocks (block_k = block_kv: none); the backward kernels' (block_q, block_kv,
    block_k) are `backward`, the forward's three where None."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    block_k = block_kv if block_k is None else min(block_k, block_kv)
    bq, bkv, bk = (block_q, block_kv, block_k) if backward is None else backward
    return fa.BlockSizes(
        block_q=block_q, block_k_major=block_kv, block_k=block_k, block_b=1,
        block_q_major_dkv=bq, block_k_major_dkv=bkv, block_k_dkv=bk,
        block_q_dkv=bq, block_k_major_dq=bkv, block_k_dq=bk, block_q_dq=bq,
    )


def _shared_kv_heads(q, k, v):
    """JAX's kernels are multi-head only: give each query head its kv head (GQA, MQA)."""
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return k, v
    return jax.numpy.repeat(k, group, axis=1), jax.numpy.repeat(v, group, axis=1)


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                    block_q: int = 128, block_kv: int = 128, block_k: int | None = None,
                    backward_blocks: tuple[int, int, int] | None = None):
    """JAX's flash attention, forward and backward (its own custom_vjp). block_kv is its block_k_major
    (keys a grid step brings in), block_k the sub-block its body walks them in (None: block_kv);
    backward_blocks: the backward kernels' (block_q, block_kv, block_k), the forward's where None."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = _shared_kv_heads(q, k, v)
    block_q, block_kv = min(block_q, q.shape[2]), min(block_kv, k.shape[2])
    if backward_blocks is not None:
        bq, bkv, bk = backward_blocks
        bq, bkv = min(bq, q.shape[2]), min(bkv, k.shape[2])
        backward_blocks = (bq, bkv, min(bk, bkv))
    return fa.flash_attention(q, k, v, causal=causal, sm_scale=scale,
                              block_sizes=_flash_block_sizes(block_q, block_kv, block_k, backward_blocks))


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
def _splash_kernel(heads: int, q_len: int, kv_len: int, causal: bool, block_q: int, block_kv: int,
                   block_kv_compute: int, fused_backward: bool, window: int | None = None,
                   backward_blocks: tuple[int, int] | None = None):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    shape = (q_len, kv_len)
    if window is not None:  # query r sees keys r - window < c <= r
        head_mask = sm.LocalMask(shape, window_size=(window - 1, 0), offset=0)
    else:
        head_mask = sm.CausalMask(shape) if causal else sm.FullMask(shape)
    bq, bkv = (block_q, block_kv) if backward_blocks is None else backward_blocks
    backward = dict(block_q_dkv=bq, block_kv_dkv=bkv, block_kv_dkv_compute=min(block_kv_compute, bkv))
    if not fused_backward:  # the fused backward computes dq in the dkv kernel: no dq blocks
        backward.update(block_q_dq=bq, block_kv_dq=bkv)
    sizes = sk.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv_compute,
                          use_fused_bwd_kernel=fused_backward, **backward)
    # The kernel holds its mask tables as arrays; built under a trace they would
    # be tracers, and this cache would leak them into the next trace.
    with jax.ensure_compile_time_eval():
        return sk.make_splash_mha(sm.MultiHeadMask([head_mask] * heads), block_sizes=sizes,
                                  head_shards=1, q_seq_shards=1)


def splash_attention(q, k, v, *, causal: bool = False, scale: float | None = None, block: int = 128,
                     window: int | None = None, block_q: int | None = None, block_kv: int | None = None,
                     block_kv_compute: int | None = None, fused_backward: bool = False, scale_in=None,
                     backward_blocks: tuple[int, int] | None = None):
    """Splash attention as model code calls it: it takes no softmax scale, so q is scaled in its own
    dtype first (bf16 in, bf16 out: no casts around the kernel). window: its local mask, each query
    seeing its own key and the window - 1 before it (causal implied).

    block: block_q and block_kv both, where not given; block_kv_compute: the keys its body takes at a
    time (None: block_kv); fused_backward: dq computed in the dk/dv kernel (one backward kernel);
    backward_blocks: the backward kernels' (block_q, block_kv), the forward's where None.
    scale_in: the dtype q is scaled in (None: q's own, as the gates time it; "float32": q·scale not
    rounded back to bf16 where the scale is no power of two, the kernel taking an f32 q, the output
    cast back to q's dtype: how the course grades JAX's kernel as a learner's, to the course's bound)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = _shared_kv_heads(q, k, v)
    block_q = min(block if block_q is None else block_q, q.shape[2])
    block_kv = min(block if block_kv is None else block_kv, k.shape[2])
    compute = block_kv if block_kv_compute is None else min(block_kv_compute, block_kv)
    if backward_blocks is not None:
        backward_blocks = (min(backward_blocks[0], q.shape[2]), min(backward_blocks[1], k.shape[2]))
    kernel = _splash_kernel(q.shape[1], q.shape[2], k.shape[2], causal, block_q, block_kv, compute,
                            fused_backward, window, backward_blocks)
    dtype = q.dtype
    if scale_in is not None:
        q = q.astype(scale_in)
    q = q * jnp.asarray(scale, q.dtype)
    # One call per batch element, not jax.vmap: vmap adds a grid axis that TPU interpret
    # mode (jax 0.10.2) does not give a dimension semantic, and batches over 1 fail there.
    if q.shape[0] == 1:  # a leading axis of one in and out is a bitcast, not a copy
        return kernel(q[0], k[0], v[0])[None].astype(dtype)
    return jnp.stack([kernel(q[b], k[b], v[b]) for b in range(q.shape[0])]).astype(dtype)


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

# ------------------------------------------------------------------ the course's specimens
#
# Kernels the course reads as specimens: the plain versions chapters 11 and 13 first build, kept as
# they were so that chapters 6 and 7's figures about them (Mosaic op counts, vreg layouts, VMEM
# padding, the scoped-VMEM refusal) stay true while the shipped solutions are tuned for a chip:
#   - `tiled_matmul`: chapter 11's tiled matmul, 128 blocks, an f32 accumulator zeroed on the first k
#     step, and no `vmem_limit_bytes` (the default scoped VMEM);
#   - `plain_flash_forward`: chapter 13's flash forward as its README first writes it, 128 blocks, the
#     running max m and sum l kept as (block_q, 1) columns (the tuned solution keeps them 128 lanes
#     wide, the lesson chapter 7 draws from these).
# Reading material, never graded code.

def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _flush():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def tiled_matmul(x: jax.Array, y: jax.Array, *, bm: int = 128, bk: int = 128, bn: int = 128) -> jax.Array:
    """x @ y in x's dtype, accumulated in f32. Each dimension must divide by its block."""
    (m, k), (k2, n) = x.shape, y.shape
    if k != k2 or x.dtype != y.dtype:
        raise ValueError(f"matmul expects (M, K) @ (K, N) of one dtype, got {x.shape} {x.dtype} "
                         f"@ {y.shape} {y.dtype}")
    bm, bk, bn = min(bm, m), min(bk, k), min(bn, n)
    for dim, size, block in (("M", m, bm), ("K", k, bk), ("N", n, bn)):
        if size % block:
            raise ValueError(f"matmul: {dim}={size} is not a multiple of its block {block}")
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def _last_kv_block(q_block, *, block_q: int, block_kv: int):
    """The last kv block any row of q block `q_block` attends under (top-left) causal masking."""
    return ((q_block + 1) * block_q - 1) // block_kv


_NEG_INF = float("-inf")


def flash_forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                         causal: bool, scale: float, block_q: int, block_kv: int):
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, _NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def step():
        q, k, v = q_ref[...], k_ref[...], v_ref[...]
        # s = q kᵀ on the MXU, bf16 in, f32 out.
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())),
                                preferred_element_type=jnp.float32) * scale
        if causal:
            rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = j * block_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, _NEG_INF)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        # A row whose keys so far are all masked keeps m = -inf; shift it by 0
        # instead, so exp(-inf - (-inf)) never makes a NaN.
        m_safe = jnp.where(m_new == _NEG_INF, 0.0, m_new)
        alpha = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        # P is rounded to v's dtype to feed the MXU; the product accumulates in f32.
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        acc_ref[...] = alpha * acc_ref[...] + pv
        m_ref[...] = m_new

    _unless_above_diagonal(step, i, j, causal=causal, block_q=block_q, block_kv=block_kv)

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        l = l_ref[...]
        o_ref[...] = (acc_ref[...] / l).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] + jnp.log(l)


def _unless_above_diagonal(step, i, j, *, causal: bool, block_q: int, block_kv: int) -> None:
    """Run step() at grid point (q block i, kv block j) unless the block is wholly masked."""
    if causal:
        pl.when(j <= _last_kv_block(i, block_q=block_q, block_kv=block_kv))(step)
    else:
        step()


def _kv_index_map(*, causal: bool, block_q: int, block_kv: int, num_kv_blocks: int, group: int):
    """The k and v index map of a (batch, head, q block, kv block) grid.

    Causal: past the diagonal the kv block index stays on the last block the q block
    needs, which is already resident, so the pipeline issues no copy.
    """
    def index(b, h, i, j):
        if causal:  # past the diagonal: stay on the last needed block (no new DMA)
            needed = _last_kv_block(i, block_q=block_q, block_kv=block_kv)
            j = jnp.minimum(j, jnp.minimum(needed, num_kv_blocks - 1))
        return b, h // group, j, 0
    return index


def _check_blocks(q: jax.Array, k: jax.Array, block_q: int, block_kv: int) -> tuple[int, int]:
    """Block sizes clamped to the lengths; a ValueError for a length they do not divide."""
    (_, heads, q_len, _), (_, kv_heads, kv_len, _) = q.shape, k.shape
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} kv heads evenly")
    block_q, block_kv = min(block_q, q_len), min(block_kv, kv_len)
    for name, length, block in (("q length", q_len, block_q), ("kv length", kv_len, block_kv)):
        if length % block:
            raise ValueError(f"{name} {length} is not a multiple of the block size {block}: "
                             f"pad the sequence or pick a block that divides it")
    return block_q, block_kv


def plain_flash_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                  scale: float | None = None, block_q: int = 128,
                  block_kv: int = 128) -> tuple[jax.Array, jax.Array]:
    """(out, lse): attention in q's dtype and the rows' logsumexp in float32."""
    batch, heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    block_q, block_kv = _check_blocks(q, k, block_q, block_kv)
    scale = head_dim ** -0.5 if scale is None else scale
    kv_index = _kv_index_map(causal=causal, block_q=block_q, block_kv=block_kv,
                            num_kv_blocks=kv_len // block_kv, group=heads // kv_heads)
    q_spec = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
    lse_spec = pl.BlockSpec((None, None, block_q, 1), lambda b, h, i, j: (b, h, i, 0))
    kernel = functools.partial(flash_forward_kernel, causal=causal, scale=scale,
                               block_q=block_q, block_kv=block_kv)
    out, lse = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, q_len, 1), jnp.float32)),
        grid=(batch, heads, q_len // block_q, kv_len // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, lse_spec),
        scratch_shapes=[pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, 1), jnp.float32),
                        pltpu.VMEM((block_q, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, lse[..., 0]
