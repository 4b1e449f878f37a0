"""Exercise ch13.causal_skipping: the README's two block formulas, plain integer arithmetic."""


def last_kv_block(q_block, *, block_q: int, block_kv: int):
    """q block i's last row, over block_kv."""
    return ((q_block + 1) * block_q - 1) // block_kv


def first_q_block(kv_block, *, block_q: int, block_kv: int):
    """kv block j's first key, over block_q."""
    return (kv_block * block_kv) // block_q
