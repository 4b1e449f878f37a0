"""Kernels the course reads as specimens: the plain versions chapters 11 and 13 first build, kept as they
were so that chapter 7's figures about them (Mosaic op counts, vreg layouts, VMEM padding) stay true while
the shipped solutions are tuned for a chip.

  - `tiled_matmul`: chapter 11's tiled matmul, 128 blocks, an f32 accumulator zeroed on the first k step.
  - `plain_flash_forward`: chapter 13's flash forward as its README first writes it, 128 blocks, the
    running max m and sum l kept as (block_q, 1) columns (chapter 13's tuned solution keeps them 128
    lanes wide, the lesson chapter 7 draws from these).

Reading material, never graded code: tests/facts/test_ch07.py and exercises/ch07 compile them.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

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


NEG_INF = float("-inf")


def flash_forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                         causal: bool, scale: float, block_q: int, block_kv: int):
    i, j = pl.program_id(2), pl.program_id(3)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
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
            s = jnp.where(rows >= cols, s, NEG_INF)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        # A row whose keys so far are all masked keeps m = -inf; shift it by 0
        # instead, so exp(-inf - (-inf)) never makes a NaN.
        m_safe = jnp.where(m_new == NEG_INF, 0.0, m_new)
        alpha = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        # P is rounded to v's dtype to feed the MXU; the product accumulates in f32.
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        acc_ref[...] = alpha * acc_ref[...] + pv
        m_ref[...] = m_new

    unless_above_diagonal(step, i, j, causal=causal, block_q=block_q, block_kv=block_kv)

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        l = l_ref[...]
        o_ref[...] = (acc_ref[...] / l).astype(o_ref.dtype)
        lse_ref[...] = m_ref[...] + jnp.log(l)


def unless_above_diagonal(step, i, j, *, causal: bool, block_q: int, block_kv: int) -> None:
    """Run step() at grid point (q block i, kv block j) unless the block is wholly masked."""
    if causal:
        pl.when(j <= _last_kv_block(i, block_q=block_q, block_kv=block_kv))(step)
    else:
        step()


def kv_index_map(*, causal: bool, block_q: int, block_kv: int, num_kv_blocks: int, group: int):
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


def check_blocks(q: jax.Array, k: jax.Array, block_q: int, block_kv: int) -> tuple[int, int]:
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
    block_q, block_kv = check_blocks(q, k, block_q, block_kv)
    scale = head_dim ** -0.5 if scale is None else scale
    kv_index = kv_index_map(causal=causal, block_q=block_q, block_kv=block_kv,
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
