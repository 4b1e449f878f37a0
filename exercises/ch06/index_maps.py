"""Exercise ch06.index_maps: kernels whose work is all in the index maps.

Write transpose(x, *, bm, bn), a tiled transpose whose output index map swaps the grid
indices, and gather_rows(table, idx), a row gather whose input index map reads the
indices from scalar prefetch (pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1)).
Each is one pallas_call; no interpret= argument.
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def transpose(x: jax.Array, *, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.T for a 2-D x (M, N), in (bm, bn) tiles, in x's dtype.

    Any M and N: ragged edges, and arrays smaller than one block (a block as large as
    the whole dimension is always legal). Blocks must stay legal for the TPU on both
    sides of the transpose.
    """
    raise NotImplementedError("write transpose(): grid (M/bm, N/bn); the output's index map swaps i and j")


def gather_rows(table: jax.Array, idx: jax.Array) -> jax.Array:
    """table[idx] for a table (V, D) and int32 indices (R,): one row per grid step.

    Every index must lie in [0, V); the kernel must not clamp or wrap one (under TPU
    interpret mode an index past the table fails, as it should). The block of one row
    must be legal: a (None, D) block of a (V, D) array is not (None counts as 1 row).
    """
    raise NotImplementedError("write gather_rows(): scalar-prefetch idx, index map lambda i, idx_ref: (idx_ref[i], ...)")
