"""Grouped-query attention: which kv head a query head reads.

H query heads share Hkv kv heads in contiguous groups of H // Hkv: query heads
0..group-1 read kv head 0, the next group kv head 1, and so on (the layout of
chapter 1's reference and of Llama-style checkpoints). Hkv == H is multi-head
attention, Hkv == 1 multi-query attention. Kernels apply this in their index
maps, so k and v are never copied per query head.
"""


def kv_head(q_head, *, group: int):
    """The kv head that query head `q_head` reads when `group` query heads share one."""
    return q_head // group
