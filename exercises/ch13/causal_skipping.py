"""Which blocks a causal kernel may skip: the block arithmetic of top-left causal attention.

Top-left alignment: query row r attends keys 0..r, whatever the two lengths. With q
blocks of `block_q` rows and kv blocks of `block_kv` keys, write:

  last_kv_block(i, block_q=, block_kv=): the last kv block any row of q block i
      attends; every later kv block lies wholly above the diagonal.
  first_q_block(j, block_q=, block_kv=): the first q block with a row that attends
      a key of kv block j; every earlier q block lies wholly above the diagonal.

Both must work on Python ints and on the traced int32 scalars an index map or a
kernel receives (pl.program_id): plain arithmetic (+, *, //) does.

Then use them in forward.py: the k and v index maps clamp the kv block index to
last_kv_block(i), so the pipeline never copies a block above the diagonal, and the
step's compute runs under pl.when(j <= last_kv_block(i)).
"""


def last_kv_block(q_block, *, block_q: int, block_kv: int):
    """The last kv block that any row of q block `q_block` attends under causal masking."""
    raise NotImplementedError("write last_kv_block(): the kv block holding q block i's last row's key")


def first_q_block(kv_block, *, block_q: int, block_kv: int):
    """The first q block with a row that attends any key of kv block `kv_block`."""
    raise NotImplementedError("write first_q_block(): the q block holding kv block j's first key's row")
