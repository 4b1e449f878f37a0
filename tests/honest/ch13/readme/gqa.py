"""Exercise ch13.gqa: query head h reads kv head h // group."""


def kv_head(q_head, *, group: int):
    return q_head // group
