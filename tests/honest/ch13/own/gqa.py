"""Exercise ch13.gqa: contiguous groups of query heads share a kv head."""


def kv_head(q_head, *, group: int):
    """Heads 0..group-1 read kv head 0, the next group kv head 1, and so on."""
    return q_head // group
