"""Exercise ch06.schedule: the schedule a Pallas TPU pipeline runs, from its BlockSpecs.

Write pipeline_schedule(grid, in_specs, out_specs, in_shapes, out_shapes): every
HBM -> VMEM copy of every input and every VMEM -> HBM write-back of every output, in the
order the grid runs, the HBM bytes they move, and the output blocks the grid leaves and
comes back to. The graded tests compare with a real pallas_call built from the same
BlockSpecs, stepped through by TPU interpret mode.
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

    grid: tuple of extents; in_specs / out_specs: pl.BlockSpecs (`spec.block_shape`, a
    tuple of ints and None; `spec.index_map(*grid_point)`, one block index per array
    dimension); in_shapes / out_shapes: jax.ShapeDtypeStructs of the arrays.

    A grid point is a tuple of ints, a block index a tuple of ints (one per array
    dimension, None dimensions included). The grid runs as a loop nest, last axis
    fastest. hbm_bytes counts only the part of each moved block that lies inside its
    array: a ragged edge block is partly padding.
    """
    raise NotImplementedError("write pipeline_schedule(): evaluate each index map over the grid, last axis fastest")
