"""Exercise ch06.legality: the BlockSpec legality rule of the Pallas TPU lowering.

Write check_block(array_shape, block_shape, dtype): None when Pallas' TPU lowering
accepts a block of block_shape over an array of array_shape and dtype, else a short
reason (a non-empty str). The graded tests ask the real lowering, run on this CPU, about
the same blocks, and compare.
"""

import jax.numpy as jnp


def check_block(array_shape: tuple[int, ...], block_shape: tuple, dtype) -> str | None:
    """None if the TPU lowering accepts this block, else the reason it does not.

    array_shape: positive ints. block_shape: the same rank, each entry a positive int
    or None (a squeezed dimension: one element, dropped from the kernel's Ref). dtype:
    a dtype or its name ("float32", "bfloat16", "float16", "int32", "int8").
    """
    raise NotImplementedError("write check_block(): the last two block dimensions against (8, 128), or rank 1")
