"""Flash attention forward: online softmax over kv blocks, the score matrix never in HBM.

    out = softmax(q kᵀ · scale, causal mask) v,   lse = logsumexp(q kᵀ · scale, masked)

q (B, H, Sq, D); k, v (B, Hkv, Skv, D) with H a multiple of Hkv (grouped-query
attention when Hkv < H). Returns out (B, H, Sq, D) in q's dtype and lse (B, H, Sq)
in float32, the residual the backward recomputes the probabilities from.

Schedule. Grid (B, H, Sq / block_q, Skv / block_kv). One grid step sees one q block
and one kv block; the output block (b, h, i) stays resident while the last axis
walks the kv blocks, so that axis carries state and is "arbitrary"; the other three
are independent ("parallel": two TensorCores may split them). VMEM scratch holds
the carried state of the online softmax for the block's rows:

    m   (block_q, 128)  running max of the raw scores q kᵀ seen so far
    l   (block_q, 128)  running sum of exp(scale · (s - m))
    acc (block_q, D)    running sum of exp(scale · (s - m)) · v, in f32

A new block of scores s moves the max to m_new = max(m, rowmax(s)); everything
accumulated so far was exponentiated against the old max, so it is rescaled by
alpha = exp(scale · (m - m_new)), which is exact. After the last kv block,
out = acc / l and lse = scale · m + log(l).

Decisions, each for a v5e. The figures are the compiler's (`tpucourse compile`, libtpu,
ahead of time) at (B, H, S, D) = (2, 16, 4096, 128) in bf16: static counts, not times.

  - Large blocks, 512 x 2048 by default. Each kv step re-reads block_kv keys for
    block_q rows of work (block_q FLOP/byte: memory-bound at 128, compute-bound at
    512), and each grid step has a fixed cost besides. A 128 x 128 step issues 16
    vmatmul (64 cycles of the four MXUs' work) in 491 bundles; a 512 x 2048 step
    issues 1024 vmatmul in 4996 bundles (the last step's flush included), in 5.1 MiB
    of the 16 MiB scoped VMEM. 512 x 1024 takes 2867 bundles for half the work.
  - Sub-blocks of SUB_KV = 512 keys inside a step, unrolled: one sub-block's
    softmax overlaps the next one's q kᵀ on the MXU, fewer (block_q, keys) f32
    tiles are live at once (register spills 2.1 MiB against 3.9 MiB, 4996 bundles
    against 5137 for one 2048-key block), and causal masking skips at this grain.
  - m and l 128 lanes wide (every lane holds the row's value): the rows' max
    and sum reach a sub-block's lanes by repeating whole vector registers, with
    no lane broadcast per step. (A (block_q, 1) array pads to the same VMEM.)
  - The scale is applied inside the exponential, exp2((s - m) · scale · log2 e):
    one multiply per score instead of two (s · scale, and the log2 e that exp
    takes before its exp2), with m tracked on the raw scores. This needs
    scale > 0, which is checked.
  - lse is written as a lane-dense row, an array (B, H, 1, Sq): a (B, H, Sq, 1)
    array pads each row's one number to 128 lanes in HBM too (64 MiB here), and
    removing the padding after the call is an XLA pass over all of it.

Causal. A kv block wholly below the diagonal is computed without a mask; one the
diagonal crosses computes only the sub-blocks some row of the q block sees, and
masks only those the diagonal crosses (over_kv_sub_blocks). A kv block wholly
above the diagonal is neither computed nor fetched: its index map points the
step at kv block 0, the first block the next q block needs, so the pipeline
copies that block early, while the step before computes, and nothing above the
diagonal is ever copied.

Lengths must be multiples of the block sizes (block sizes are clamped to the lengths
first); anything else is refused with a ValueError naming the length and the block.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from . import causal_skipping, gqa

NEG_INF = float("-inf")
LANES = 128  # width of the row statistics: one vector register row
SUB_KV = 512  # keys per sub-block inside a grid step
# Under causal masking a diagonal step of n sub-blocks has n straight-line variants (one per
# count of needed sub-blocks), 1 + 2 + ... + n bodies in all: past this many sub-blocks they
# grow instead, which keeps the kernel's code, and its compile time, in bounds.
CAUSAL_SUB_BLOCKS = 4
LOG2_E = math.log2(math.e)
# q kᵀ without transposing k: contract the last (D) axes of a (rows, D) and a (keys, D) tile.
CONTRACT_D = (((1,), (1,)), ((), ()))


def lanes(x, width: int):
    """A (rows, LANES) array whose lanes all hold one value per row, as (rows, width):
    whole vector registers repeated, or the first `width` lanes."""
    if width <= LANES:
        return x[:, :width]
    if width % LANES:
        return jnp.broadcast_to(x[:, :1], (x.shape[0], width))
    return jnp.tile(x, (1, width // LANES))


def flash_forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, m_ref, l_ref, acc_ref, *,
                         causal: bool, scale: float, block_q: int, block_kv: int, sub_kv: int):
    i, j = pl.program_id(2), pl.program_id(3)
    head_dim = acc_ref.shape[1]
    exp2_scale = scale * LOG2_E  # exp(scale · x) = exp2(scale · log2(e) · x)

    @pl.when(j == 0)
    def _init():
        m_ref[...] = jnp.full(m_ref.shape, NEG_INF, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    def fold(c, masked):
        """Fold keys c · sub_kv .. of the kv block into the rows' running state."""
        keys = pl.ds(c * sub_kv, sub_kv)
        k, v = k_ref[keys, :], v_ref[keys, :]
        # s = q kᵀ on the MXU, bf16 in, f32 out; scaled inside the exponential below.
        s = jax.lax.dot_general(q_ref[...], k, CONTRACT_D, preferred_element_type=jnp.float32)
        if masked:
            rows = i * block_q + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = j * block_kv + c * sub_kv + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, NEG_INF)
        m_prev = m_ref[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        if masked:
            # A row whose keys so far are all masked keeps m = -inf; shift it by 0
            # instead, so exp(-inf - (-inf)) never makes a NaN. (Unmasked scores
            # are finite, so only a masked sub-block can leave m at -inf.)
            m_new_safe = jnp.where(m_new == NEG_INF, 0.0, m_new)
        else:
            m_new_safe = m_new
        alpha = jnp.exp2((m_prev - m_new_safe) * exp2_scale)
        p = jnp.exp2((s - lanes(m_new_safe, sub_kv)) * exp2_scale)
        l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
        # P is rounded to v's dtype to feed the MXU; the product accumulates in f32.
        pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        acc_ref[...] = lanes(alpha, head_dim) * acc_ref[...] + pv
        m_ref[...] = m_new

    over_kv_sub_blocks(fold, i, j, causal=causal, block_q=block_q, block_kv=block_kv,
                       sub_kv=sub_kv)

    @pl.when(j == pl.num_programs(3) - 1)
    def _flush():
        l = l_ref[...]
        o_ref[...] = (acc_ref[...] / lanes(l, head_dim)).astype(o_ref.dtype)
        lse = m_ref[...] * scale + jnp.log(l)  # (block_q, LANES), every lane the row's value
        lse_ref[...] = lse.T[:1, :]  # the lane-dense (1, block_q) row


def sub_block_size(block_q: int, block_kv: int, *, causal: bool) -> int:
    """Keys per sub-block: SUB_KV (causal: at most CAUSAL_SUB_BLOCKS of them) where it divides
    the kv block and lines up with the q block (one of the two divides the other), else the
    whole kv block."""
    sub = min(max(SUB_KV, block_kv // CAUSAL_SUB_BLOCKS) if causal else SUB_KV, block_kv)
    if block_kv % sub or (block_q % sub and sub % block_q):
        return block_kv
    return sub


def over_kv_sub_blocks(fold, i, j, *, causal: bool, block_q: int, block_kv: int,
                       sub_kv: int) -> None:
    """Call fold(c, masked) for each sub-block c of kv block j that q block i needs.

    Not causal: every sub-block, unmasked. Causal, at grid point (q block i, kv block j):
      - the kv block is wholly below the diagonal (its last key precedes the q block's
        first row): every sub-block, unmasked;
      - else the sub-blocks up to the one holding the q block's last row (the others lie
        above the diagonal: skipped), the last max(1, block_q // sub_kv) of them masked
        (the diagonal crosses at most those, as sub_block_size lines the blocks up);
      - a kv block wholly above the diagonal needs no sub-block: nothing runs.
    Each case is straight-line code under its own pl.when, so the scheduler overlaps one
    sub-block's softmax with the next one's matmul.
    """
    count = block_kv // sub_kv
    if not causal:
        for c in range(count):
            fold(c, masked=False)
        return
    below = (j + 1) * block_kv - 1 <= i * block_q
    # Sub-blocks of kv block j that some row of q block i sees: the last holds its last row.
    last = causal_skipping.last_kv_block(i, block_q=block_q, block_kv=sub_kv)
    needed = jnp.minimum(last - j * count + 1, count)
    crossed = max(1, block_q // sub_kv)

    @pl.when(below)
    def _below():
        for c in range(count):
            fold(c, masked=False)

    for n in range(1, count + 1):
        @pl.when(jnp.logical_not(below) & (needed == n))
        def _diagonal(n=n):
            for c in range(n):
                fold(c, masked=c >= n - crossed)


def kv_index_map(*, causal: bool, block_q: int, block_kv: int, group: int):
    """The k and v index map of a (batch, head, q block, kv block) grid.

    Causal: a step past the diagonal points at kv block 0, where the next q block's walk
    starts. The pipeline copies a block only when its index changes, so past the diagonal
    it copies block 0 once, early, while the last needed step computes, and no block
    above the diagonal is copied.
    """
    def index(b, h, i, j):
        if causal:  # past the diagonal: fetch the next walk's first block (no wasted DMA)
            needed = causal_skipping.last_kv_block(i, block_q=block_q, block_kv=block_kv)
            j = jnp.where(j <= needed, j, 0)
        return b, gqa.kv_head(h, group=group), j, 0
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


def check_scale(scale: float | None, head_dim: int) -> float:
    """The softmax scale (D ** -0.5 by default); a ValueError unless it is positive."""
    scale = head_dim ** -0.5 if scale is None else scale
    if not scale > 0:
        raise ValueError(f"scale {scale} must be positive: the running max is taken over the "
                         f"unscaled scores")
    return scale


def flash_forward(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                  scale: float | None = None, block_q: int = 512,
                  block_kv: int = 2048) -> tuple[jax.Array, jax.Array]:
    """(out, lse): attention in q's dtype and the rows' logsumexp in float32."""
    batch, heads, q_len, head_dim = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    block_q, block_kv = check_blocks(q, k, block_q, block_kv)
    scale = check_scale(scale, head_dim)
    kv_index = kv_index_map(causal=causal, block_q=block_q, block_kv=block_kv,
                            group=heads // kv_heads)
    q_spec = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i, j: (b, h, i, 0))
    kv_spec = pl.BlockSpec((None, None, block_kv, head_dim), kv_index)
    lse_spec = pl.BlockSpec((None, None, 1, block_q), lambda b, h, i, j: (b, h, 0, i))
    kernel = functools.partial(flash_forward_kernel, causal=causal, scale=scale, block_q=block_q,
                               block_kv=block_kv,
                               sub_kv=sub_block_size(block_q, block_kv, causal=causal))
    out, lse = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, 1, q_len), jnp.float32)),
        grid=(batch, heads, q_len // block_q, kv_len // block_kv),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, lse_spec),
        scratch_shapes=[pltpu.VMEM((block_q, LANES), jnp.float32),
                        pltpu.VMEM((block_q, LANES), jnp.float32),
                        pltpu.VMEM((block_q, head_dim), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
    )(q, k, v)
    return out, lse[:, :, 0, :]
