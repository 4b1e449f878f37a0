"""Exercise ch15.band: the band's block arithmetic, from the README's two formulas.

Query row r attends keys r - window < c <= r. at_step(), clamped() and widest() are the
given helpers, unchanged.
"""

import jax
import jax.numpy as jnp


def kv_blocks(q_block, *, block_q: int, block_kv: int, window: int, num_kv_blocks: int):
    """(first, last): the kv blocks that some row of q block `q_block` attends."""
    first = jnp.maximum(0, q_block * block_q - window + 1) // block_kv
    last = jnp.minimum(((q_block + 1) * block_q - 1) // block_kv, num_kv_blocks - 1)
    return first, last


def q_blocks(kv_block, *, block_q: int, block_kv: int, window: int, num_q_blocks: int):
    """(first, last): the q blocks with some row that attends a key of kv block `kv_block`."""
    first = (kv_block * block_kv) // block_q
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
