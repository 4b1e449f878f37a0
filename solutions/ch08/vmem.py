"""How much VMEM a pipelined Pallas kernel occupies.

Every input and output block sits in VMEM in `buffers` copies (two while the pipeline
fetches the next block as the kernel works on the current one; one for a block fetched
only once), every scratch array once. VMEM is tiled, so each array occupies its shape
padded: lanes (the last dimension) to a multiple of 128, sublanes (the one before) to
a multiple of 8, or, below 8 rows, to the next power of two, but never fewer rows than a
32-bit sublane packs (1 f32, 2 bf16, 4 int8). These are the sizes the Mosaic compiler
itself reports (bench/vmem_compiler_figures.py).
"""

import jax.numpy as jnp

LANES = 128
SUBLANES = 8


def padded_bytes(shape, dtype) -> int:
    """Bytes one VMEM copy of an array of this shape and dtype occupies."""
    itemsize = jnp.dtype(dtype).itemsize
    *leading, rows, lanes = shape
    if rows >= SUBLANES:
        rows = -(-rows // SUBLANES) * SUBLANES
    else:
        power = 1
        while power < rows:
            power *= 2
        rows = max(power, 4 // itemsize)
    lanes = -(-lanes // LANES) * LANES
    count = 1
    for d in leading:
        count *= d
    return count * rows * lanes * itemsize


def vmem_footprint(blocks, scratch=()) -> int:
    """VMEM bytes of a kernel: every (block_shape, dtype, buffers) block plus every (shape, dtype) scratch."""
    total = sum(buffers * padded_bytes(shape, dtype) for shape, dtype, buffers in blocks)
    return total + sum(padded_bytes(shape, dtype) for shape, dtype in scratch)
