"""Which blocks a sliding-window (local, causal) attention may skip: the band's block arithmetic.

Query row r attends keys c with r - window < c <= r: the key at its own position and
the window - 1 keys before it (top-left alignment, as chapters 1 and 13: row r is
position r whatever the two lengths). The allowed (row, key) pairs form a band of
width `window` under the diagonal; everything else is masked.

With q blocks of `block_q` rows and kv blocks of `block_kv` keys:

  - q block i holds rows i·block_q .. (i + 1)·block_q - 1. Its first row reaches back
    to key i·block_q - window + 1 and its last row forward to key (i + 1)·block_q - 1,
    so it needs kv blocks max(0, i·block_q - window + 1) // block_kv through
    ((i + 1)·block_q - 1) // block_kv;
  - kv block j holds keys j·block_kv .. (j + 1)·block_kv - 1. The first row that sees
    its first key is j·block_kv, the last row that sees its last key is
    (j + 1)·block_kv - 1 + window - 1, so the q blocks that need it run from
    j·block_kv // block_q through ((j + 1)·block_kv + window - 2) // block_q.

The last block of each range is clamped to the number of blocks there are. Every
function works on Python ints and on the traced int32 scalars an index map or a
kernel receives (pl.program_id), so one definition serves the grid size, the index
maps and the pl.when that skips the compute.
"""

import jax
import jax.numpy as jnp


def kv_blocks(q_block, *, block_q: int, block_kv: int, window: int, num_kv_blocks: int):
    """(first, last): the kv blocks that some row of q block `q_block` attends."""
    first = jnp.maximum(q_block * block_q - window + 1, 0) // block_kv
    last = jnp.minimum(((q_block + 1) * block_q - 1) // block_kv, num_kv_blocks - 1)
    return first, last


def q_blocks(kv_block, *, block_q: int, block_kv: int, window: int, num_q_blocks: int):
    """(first, last): the q blocks with some row that attends a key of kv block `kv_block`.

    first > last when no query sees the block (keys past the last query row)."""
    first = kv_block * block_kv // block_q
    last = jnp.minimum(((kv_block + 1) * block_kv + window - 2) // block_q, num_q_blocks - 1)
    return first, last


def at_step(blocks, index, step, **sizes):
    """(block, in band) at band step `step` of block `index`: blocks(index) is (first, last),
    the step works on first + step, which lies in the band while it is <= last."""
    first, last = blocks(index, **sizes)
    return first + step, first + step <= last


def clamped(blocks, index, step, **sizes):
    """The block an index map fetches at band step `step`: first + step, held at the band's
    last block once past it (and never below 0 or past the array's last block)."""
    first, last = blocks(index, **sizes)
    count = sizes.get("num_kv_blocks", sizes.get("num_q_blocks"))
    return jnp.clip(jnp.minimum(first + step, last), 0, count - 1)


def widest(blocks, count: int, **sizes) -> int:
    """The most blocks that `blocks(index, **sizes)` spans over indices 0..count-1: the
    length of the band's grid axis (at least 1)."""
    with jax.ensure_compile_time_eval():  # concrete even when called under a trace
        first, last = blocks(jnp.arange(count), **sizes)
        return max(1, int(jnp.max(last - first + 1)))
