"""Which blocks a sliding-window (local, causal) attention may skip: the band's block arithmetic.

Query row r attends keys c with r - window < c <= r: its own key and the window - 1
before it (top-left alignment: row r is position r whatever the two lengths). Write:

  kv_blocks(q_block, *, block_q, block_kv, window, num_kv_blocks) -> (first, last)
      the kv blocks some row of q block `q_block` attends, last clamped to
      num_kv_blocks - 1;
  q_blocks(kv_block, *, block_q, block_kv, window, num_q_blocks) -> (first, last)
      the q blocks with some row that attends a key of kv block `kv_block`, last
      clamped to num_q_blocks - 1 (first > last when no query sees the block).

Both must work on Python ints and on traced int32 scalars (index maps and
pl.program_id pass those): use jnp.maximum / jnp.minimum, not max() / min().
at_step(), clamped() and widest() are given: a kernel's block at a band step, an index
map's clamped block, and the band's grid length, all from your two functions.
"""

import jax
import jax.numpy as jnp


def kv_blocks(q_block, *, block_q: int, block_kv: int, window: int, num_kv_blocks: int):
    """(first, last): the kv blocks that some row of q block `q_block` attends."""
    raise NotImplementedError("write kv_blocks(): the first and last kv block of a q block's band")


def q_blocks(kv_block, *, block_q: int, block_kv: int, window: int, num_q_blocks: int):
    """(first, last): the q blocks with some row that attends a key of kv block `kv_block`.

    first > last when no query sees the block (keys past the last query row)."""
    raise NotImplementedError("write q_blocks(): the first and last q block that sees a kv block")


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
