"""Exercise ch13.causal_skipping: which blocks top-left causal attention can skip.

Query row r sees keys 0..r. A q block is needed up to the kv block that holds the key
of its last row; a kv block is needed from the q block that holds the row of its first key.
"""


def last_kv_block(q_block, *, block_q: int, block_kv: int):
    """The last kv block any row of q block `q_block` attends."""
    last_row = q_block * block_q + (block_q - 1)
    return last_row // block_kv


def first_q_block(kv_block, *, block_q: int, block_kv: int):
    """The first q block with a row that attends a key of kv block `kv_block`."""
    first_key = kv_block * block_kv
    return first_key // block_q
