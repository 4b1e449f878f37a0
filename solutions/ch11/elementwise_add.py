"""Elementwise add: the warm-up kernel.

A 2-D grid of (bm, bn) blocks; every operand and the output use the same
BlockSpec, so grid step (i, j) reads block (i, j) of x and y into VMEM and
writes block (i, j) of the output. Shapes need not divide the block: the grid
is rounded up with pl.cdiv and Pallas pads the last partial block on reads and
drops the padding on writes.
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x: jax.Array, y: jax.Array, *, block_shape: tuple[int, int] = (256, 512)) -> jax.Array:
    """x + y for 2-D arrays of one shape and dtype, computed block by block."""
    if x.shape != y.shape or x.dtype != y.dtype or x.ndim != 2:
        raise ValueError(f"add expects two 2-D arrays of one shape and dtype, got {x.shape} "
                         f"{x.dtype} and {y.shape} {y.dtype}")
    m, n = x.shape
    # A block as large as the whole dimension is always legal, whatever its size.
    bm, bn = min(block_shape[0], m), min(block_shape[1], n)
    spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, y)
