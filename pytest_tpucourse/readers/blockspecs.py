"""BlockSpecs on a CPU: what the TPU lowering says about a block.

Neither interpreter checks a block's shape; Pallas' TPU (Mosaic) lowering does, and it
runs on a CPU (`lowering_platforms=("tpu",)`, about 10 ms a block). `lowering_error`
asks it about one block of one array, through a kernel that copies that block
(`one_block_copy`), and `explain` says its refusal in the course's words. A block rule
written by hand is judged against it by checking/block_rules.py; the BlockSpec sandbox
(`tpucourse blockspec`) is instruments/blockspec_sandbox.py.

The lowering checks the (8, 128) rule for every dtype alike. Dtype-specific tiles
((16, 128) for bf16, (32, 128) for int8) and the scoped VMEM limit are the Mosaic
compiler's business: on a TPU, or with libtpu's ahead-of-time compiler (the
tpu-compile extra), which compiler/block_verdict.py asks about the same copy kernel.
"""

from __future__ import annotations

import functools

LANES = 128
SUBLANES = 8  # per 32-bit word; a 16-bit type packs 2 rows into one, an 8-bit type 4


@functools.lru_cache(maxsize=4096)
def lowering_error(array_shape: tuple[int, ...], block_shape: tuple, dtype: str) -> str | None:
    """None if the TPU lowering accepts `block_shape` over an array of this shape and dtype,
    else its error message. Block dimensions: positive ints, or None (squeezed)."""
    import jax
    import jax.numpy as jnp

    from .mosaic import lowering_for

    array_shape, block_shape = tuple(array_shape), tuple(block_shape)
    array = jax.ShapeDtypeStruct(array_shape, jnp.dtype(dtype))
    with lowering_for(None):
        try:
            jax.jit(one_block_copy(array_shape, block_shape)).trace(array).lower(lowering_platforms=("tpu",))
        except Exception as error:  # the lowering's verdict, whatever its type
            return f"{type(error).__name__}: {error}"
    return None


def one_block_copy(array_shape: tuple, block_shape: tuple):
    """A kernel that copies the first block of an array: one grid step, one buffer per operand."""
    import jax
    from jax.experimental import pallas as pl

    rank = len(array_shape)

    def copy_block(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def copy(x):
        spec = pl.BlockSpec(block_shape, lambda i: (0,) * rank)
        out = jax.ShapeDtypeStruct(array_shape, x.dtype)
        return pl.pallas_call(copy_block, out_shape=out, grid=(1,), in_specs=[spec],
                              out_specs=spec)(x)

    return copy


def explain(array_shape, block_shape, dtype, error: str) -> str:
    """The lowering's rejection of a block, in the course's words."""
    sizes = tuple(1 if b is None else b for b in block_shape)
    if "rank >= 1" in error:
        return "a block needs at least one dimension (rank 0 is rejected)"
    if "rank 1 block" in error:
        packing = _packing(dtype)
        return (f"a rank-1 block must be the whole array ({array_shape[0]}), a multiple of "
                f"{SUBLANES * LANES} (one vreg), or a power of two of at least "
                f"{LANES * packing} (128 x {packing} {dtype} per 32-bit word); {sizes[0]} is none")
    if "divisible by 8 and 128" in error:
        reasons = []
        for axis, tile, name in ((-2, SUBLANES, "sublanes"), (-1, LANES, "lanes")):
            block, full = sizes[axis], array_shape[axis]
            if block != full and block % tile:
                squeezed = " (None counts as 1)" if block_shape[axis] is None else ""
                reasons.append(f"dimension {axis} of the block is {block}{squeezed}: neither a "
                               f"multiple of {tile} ({name}) nor the array's full {full}")
        return "; ".join(reasons) or first_line(error)
    return first_line(error)


def first_line(error: str) -> str:
    """A refusal's first line (a compiler's or the lowering's message can run to pages)."""
    return error.strip().splitlines()[0] if error.strip() else "rejected"


def _packing(dtype) -> int:
    import jax.numpy as jnp

    return max(1, 4 // jnp.dtype(dtype).itemsize)


def native_tile(dtype) -> tuple[int, int]:
    """The (rows, lanes) one vreg holds of this dtype: (8·packing, 128)."""
    return SUBLANES * _packing(dtype), LANES
