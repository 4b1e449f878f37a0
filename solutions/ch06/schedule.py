"""The schedule a Pallas TPU pipeline runs, worked out from the BlockSpecs alone.

The grid runs as a loop nest, last axis fastest. Before each step the pipeline needs
every operand's block in VMEM: an input block is copied in from HBM only when its
block index differs from the previous step's (the first step always copies), and an
output block is written back to HBM when the next step's index differs, or when the
grid ends. Nothing else moves. So the index maps alone give every transfer, and
multiplying by the bytes of each block's in-bounds part gives the HBM traffic.

An output block is never read back from HBM. If the grid leaves a block and comes
back to it later (a revisit), the second visit starts from a buffer that no longer
holds the first visit's result, and its write-back overwrites it in HBM: a reduction
axis must be innermost so that each output block's visits are consecutive.
"""

import itertools
import math
from typing import NamedTuple

import jax.numpy as jnp

Transfer = tuple[tuple[int, ...], tuple[int, ...]]  # (grid point, block index)


class Schedule(NamedTuple):
    copies: list[list[Transfer]]  # per input: each HBM -> VMEM copy, in grid order
    write_backs: list[list[Transfer]]  # per output: each VMEM -> HBM write-back, in grid order
    hbm_bytes: int  # bytes of every copy and write-back, in-bounds elements only
    revisited: list[list[tuple[int, ...]]]  # per output: sorted blocks the grid comes back to


def pipeline_schedule(grid, in_specs, out_specs, in_shapes, out_shapes) -> Schedule:
    """The copies, write-backs, HBM bytes and revisited output blocks of a pipelined grid.

    grid: tuple of extents; in_specs / out_specs: pl.BlockSpecs (index maps take one
    int per grid axis); in_shapes / out_shapes: jax.ShapeDtypeStructs of the arrays.
    """
    points = list(itertools.product(*(range(extent) for extent in grid)))  # last axis fastest
    copies, write_backs, revisited = [], [], []
    hbm_bytes = 0
    for spec, array in zip(in_specs, in_shapes):
        blocks = [_block_index(spec, point) for point in points]
        moves = [(p, b) for s, (p, b) in enumerate(zip(points, blocks))
                 if s == 0 or b != blocks[s - 1]]
        copies.append(moves)
        hbm_bytes += sum(_in_bounds_bytes(spec, array, b) for _, b in moves)
    for spec, array in zip(out_specs, out_shapes):
        blocks = [_block_index(spec, point) for point in points]
        moves = [(p, b) for s, (p, b) in enumerate(zip(points, blocks))
                 if s == len(points) - 1 or b != blocks[s + 1]]
        write_backs.append(moves)
        hbm_bytes += sum(_in_bounds_bytes(spec, array, b) for _, b in moves)
        # Each write-back ends one visit: a block written back twice was visited twice.
        written = [b for _, b in moves]
        revisited.append(sorted({b for b in written if written.count(b) > 1}))
    return Schedule(copies, write_backs, hbm_bytes, revisited)


def _block_index(spec, point) -> tuple[int, ...]:
    return tuple(int(i) for i in spec.index_map(*point))


def _in_bounds_bytes(spec, array, block) -> int:
    """Bytes of the part of a block that lies inside the array (a ragged edge block is
    partly padding, and padding never crosses HBM)."""
    sizes = [1 if b is None else b for b in spec.block_shape]
    inside = (max(0, min((i + 1) * size, dim) - i * size)
              for i, size, dim in zip(block, sizes, array.shape))
    return math.prod(inside) * jnp.dtype(array.dtype).itemsize
