"""Exercise ch11.elementwise_add: the warm-up kernel.

Write add(x, y, *, block_shape) as a Pallas kernel: a 2-D grid of blocks, one
BlockSpec shared by both operands and the output. The chapter README explains
grids, BlockSpecs and index maps; `pytest exercises/ch11/test_elementwise_add.py`
grades this file.
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add(x: jax.Array, y: jax.Array, *, block_shape: tuple[int, int] = (256, 512)) -> jax.Array:
    """x + y for 2-D arrays of one shape and dtype, computed block by block.

    Shapes need not be multiples of block_shape (the last blocks may be partial),
    and an array smaller than a block is a single block.
    """
    raise NotImplementedError("write add(): a grid of (bm, bn) blocks, o_ref[...] = x_ref[...] + y_ref[...]")
