"""Kernels whose work is all in the index maps: a tiled transpose and a row gather.

transpose: grid (M/bm, N/bn). Step (i, j) reads x's block (i, j), a (bm, bn) tile, and
writes it transposed to block (j, i) of the (N, M) output, a (bn, bm) tile. The swap
lives in the output's index map; the kernel body only transposes one tile in VMEM.
Both axes are independent ("parallel"). A ragged edge needs nothing special: the
edge block is padded on read and masked on write, and the padding of a (bm, bn) tile
lands exactly in the padding of its (bn, bm) image.

gather_rows: out[r] = table[idx[r]]. The indices are scalar-prefetched into SMEM
(`pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1)`), so an index map can read
them before the step's copy is issued: step r copies row idx[r]. A row is a block of
one row, and a block's second-to-last dimension must be a multiple of 8 or the
array's whole dimension; so the table is viewed as (V, 1, D), where a (None, 1, D)
block is legal (its last two dimensions are the array's own). The caller owns the range
[0, V): on a TPU, what an index past it does depends on where XLA put the table (a table in
HBM: a compiled bounds check halts the kernel; a small table copied to VMEM: the index is
clamped to the last row; chapter 6's README).
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def transpose_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].T


def transpose(x: jax.Array, *, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.T for a 2-D x (M, N), in (bm, bn) tiles; any M and N (ragged edges included)."""
    if x.ndim != 2:
        raise ValueError(f"transpose expects a 2-D array, got shape {x.shape}")
    m, n = x.shape
    bm, bn = min(bm, m), min(bn, n)  # a block as large as the whole dimension is always legal
    return pl.pallas_call(
        transpose_kernel,
        out_shape=jax.ShapeDtypeStruct((n, m), x.dtype),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
        in_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((bn, bm), lambda i, j: (j, i)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x)


def gather_kernel(idx_ref, row_ref, o_ref):
    del idx_ref  # used by the index maps only
    o_ref[...] = row_ref[...]


def gather_rows(table: jax.Array, idx: jax.Array) -> jax.Array:
    """table[idx] for a table (V, D) and int32 indices (R,), one grid step per row."""
    (v, d), (r,) = table.shape, idx.shape
    rows = table.reshape(v, 1, d)  # a layout change, no data moves
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(r,),
        in_specs=[pl.BlockSpec((None, 1, d), lambda i, idx_ref: (idx_ref[i], 0, 0))],
        out_specs=pl.BlockSpec((None, 1, d), lambda i, idx_ref: (i, 0, 0)),
    )
    out = pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((r, 1, d), table.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(idx, rows)
    return out.reshape(r, d)
