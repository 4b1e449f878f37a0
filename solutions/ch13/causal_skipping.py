"""Which blocks a causal kernel may skip: the block arithmetic of top-left causal attention.

Top-left alignment: query row r attends keys 0..r, whatever the two lengths (the
convention of jax.experimental.pallas.ops.tpu.flash_attention and of chapter 1).
With q blocks of `block_q` rows and kv blocks of `block_kv` keys:

  - q block i ends at row (i + 1) * block_q - 1, so the last kv block any of its
    rows needs is ((i + 1) * block_q - 1) // block_kv; later kv blocks lie wholly
    above the diagonal;
  - kv block j starts at key j * block_kv, so the first q block that needs it is
    (j * block_kv) // block_q; earlier q blocks lie wholly above the diagonal.

Both work on Python ints and on the traced int32 scalars an index map or a kernel
receives (pl.program_id), so one definition serves the grid, the index maps and
the pl.when that skips the compute.
"""


def last_kv_block(q_block, *, block_q: int, block_kv: int):
    """The last kv block that any row of q block `q_block` attends under causal masking."""
    return ((q_block + 1) * block_q - 1) // block_kv


def first_q_block(kv_block, *, block_q: int, block_kv: int):
    """The first q block with a row that attends any key of kv block `kv_block`."""
    return (kv_block * block_kv) // block_q
