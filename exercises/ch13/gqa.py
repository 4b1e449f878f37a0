"""Grouped-query attention: which kv head a query head reads.

H query heads share Hkv kv heads in contiguous groups of H // Hkv: query heads
0..group-1 read kv head 0, the next group kv head 1, and so on (chapter 1's
reference). Hkv == H is multi-head attention, Hkv == 1 multi-query attention.
Write kv_head(), then use it in the index maps of your kernels (forward.py and the
dq kernel in backward.py), and sum dk and dv over the group in the dk/dv kernel.
"""


def kv_head(q_head, *, group: int):
    """The kv head that query head `q_head` reads when `group` query heads share one."""
    raise NotImplementedError("write kv_head(): the kv head of query head h")
