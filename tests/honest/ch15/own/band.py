"""Exercise ch15.band: the blocks a sliding window touches, from the rows and keys at the
edges of each block (README: "The worked variant: a band under the diagonal").

at_step(), clamped() and widest() ship written and are kept as given.
"""

import jax
import jax.numpy as jnp


def kv_blocks(q_block, *, block_q: int, block_kv: int, window: int, num_kv_blocks: int):
    """(first, last) kv block of the band of q block `q_block`."""
    top_row = q_block * block_q
    bottom_row = top_row + block_q - 1
    earliest_key = jnp.maximum(top_row - (window - 1), 0)  # the top row's first key
    latest_key = bottom_row  # the bottom row's own key
    return earliest_key // block_kv, jnp.minimum(latest_key // block_kv, num_kv_blocks - 1)


def q_blocks(kv_block, *, block_q: int, block_kv: int, window: int, num_q_blocks: int):
    """(first, last) q block that sees some key of kv block `kv_block`."""
    first_key = kv_block * block_kv
    last_key = first_key + block_kv - 1
    first_row = first_key  # the first key is first seen by its own row
    last_row = last_key + window - 1  # the last key is last seen window - 1 rows later
    return first_row // block_q, jnp.minimum(last_row // block_q, num_q_blocks - 1)


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
