"""The block rule of the Pallas TPU lowering, as one function.

A BlockSpec's block lives in VMEM, laid out in tiles of (sublanes, lanes) = (8, 128)
32-bit words, so the lowering looks only at a block's last two dimensions: each must
be a multiple of its tile side (8 for the second-to-last, 128 for the last) or the
array's whole dimension. Leading dimensions may be anything. A `None` (squeezed)
dimension is a block of size 1: legal in the last two only where the array's
dimension is 1 too. The check is the same for every dtype: bf16's native tile is
(16, 128), but a (8, 128) bf16 block still lowers.

A rank-1 block has no sublane dimension, and its rule depends on the dtype: the whole
array, a multiple of one full vreg (8 · 128 = 1024 elements), or a power of two of at
least 128 · packing elements, where packing is how many elements share a 32-bit word
(1 for 32-bit, 2 for 16-bit, 4 for 8-bit types).
"""

import jax.numpy as jnp

SUBLANES = 8
LANES = 128


def check_block(array_shape: tuple[int, ...], block_shape: tuple, dtype) -> str | None:
    """None if the TPU lowering accepts this block, else the reason it does not."""
    if len(block_shape) != len(array_shape):
        raise ValueError(f"block {block_shape} and array {array_shape} differ in rank")
    if not block_shape:
        return "a block needs at least one dimension: the lowering rejects rank-0 blocks"
    sizes = tuple(1 if b is None else b for b in block_shape)
    if len(sizes) == 1:
        return _check_rank_1(array_shape[0], sizes[0], jnp.dtype(dtype).itemsize)
    for axis, tile in ((-2, SUBLANES), (-1, LANES)):
        block, full = sizes[axis], array_shape[axis]
        if block != full and block % tile:
            squeezed = " (a None dimension counts as 1)" if block_shape[axis] is None else ""
            return (f"block dimension {axis} is {block}{squeezed}: neither a multiple of {tile} "
                    f"nor the array's full {full}")
    return None


def _check_rank_1(full: int, block: int, itemsize: int) -> str | None:
    packing = 4 // itemsize
    vreg = SUBLANES * LANES
    smallest_power = LANES * packing
    if block == full or block % vreg == 0:
        return None
    if block >= smallest_power and block & (block - 1) == 0:
        return None
    return (f"a rank-1 block of {block} is neither the array's full {full}, a multiple of "
            f"{vreg}, nor a power of two of at least {smallest_power} (128 x {packing} per "
            f"32-bit word)")
