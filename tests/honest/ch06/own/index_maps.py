"""Exercise ch06.index_maps: tiles moved by their index maps, nothing computed."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def transpose(x: jax.Array, *, bm: int = 128, bn: int = 128) -> jax.Array:
    """x.T for a 2-D x, tile by tile."""
    rows, cols = x.shape
    tile_r = rows if bm >= rows else bm
    tile_c = cols if bn >= cols else bn

    def swap(src, dst):
        dst[...] = jnp.transpose(src[...])

    return pl.pallas_call(
        swap,
        out_shape=jax.ShapeDtypeStruct((cols, rows), x.dtype),
        grid=((rows + tile_r - 1) // tile_r, (cols + tile_c - 1) // tile_c),
        in_specs=[pl.BlockSpec((tile_r, tile_c), lambda r, c: (r, c))],
        out_specs=pl.BlockSpec((tile_c, tile_r), lambda r, c: (c, r)),
    )(x)


def gather_rows(table: jax.Array, idx: jax.Array) -> jax.Array:
    """table[idx] for int32 indices in [0, V), by scalar prefetch."""
    vocab, width = table.shape
    count = idx.shape[0]
    as_rows = table.reshape(vocab, 1, width)  # one row is then a legal (1, width) block

    def copy_row(indices, row_ref, out_ref):
        del indices
        out_ref[...] = row_ref[...]

    picked = pl.pallas_call(
        copy_row,
        out_shape=jax.ShapeDtypeStruct((count, 1, width), table.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(count,),
            in_specs=[pl.BlockSpec((1, 1, width), lambda step, indices: (indices[step], 0, 0))],
            out_specs=pl.BlockSpec((1, 1, width), lambda step, indices: (step, 0, 0)),
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )(idx, as_rows)
    return picked.reshape(count, width)
