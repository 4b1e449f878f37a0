"""Exercise ch07.verdicts: predict the TPU toolchain's verdict on a small kernel, before asking it.

The kernel described: `pl.pallas_call` over the grid (shape[0] // block[0],
shape[1] // block[1]), one input of `shape` and `dtype` in `block`-shaped blocks
(index map (i, j) -> (i, j)), one output, and a body applying `body` to the block:

    "copy"         o = x
    "double"       o = x * 2                 (in x's dtype)
    "cumsum"       o = jnp.cumsum(x, axis=-1)
    "matmul"       o = jnp.dot(x, ones((L, L), x.dtype))   (no preferred_element_type)
    "split_lanes"  o = x.reshape(2 * rows, lanes // 2)     (output block (2 * rows, lanes // 2))
"""

import numpy as np


def predict_verdict(body: str, shape: tuple, dtype: str, block: tuple, chip: str = "v5e",
                    libtpu: tuple = (0, 0, 50)) -> str:
    """The first verdict the toolchain reaches for this kernel on `chip`, one of:

    "ok"              lowered and compiled
    "block shape"     Pallas' TPU lowering refuses the BlockSpec
    "unsupported op"  Pallas' TPU lowering refuses the body
    "tiling"          the compiler: the block does not follow the tiling of the array in HBM (E2002)
    "mosaic"          the compiler: Mosaic cannot do the body's vector work
    "vmem"            the compiler: the blocks do not fit the scoped VMEM (E1001)

    The lowering runs first, then the compiler: a kernel refused by the lowering never
    reaches the compiler. chip is "v5e", "v5p", "v6e" or "v7x". libtpu is the compiler's
    version, (0, 0, 42) or (0, 0, 50): the graded tests ask for both, whichever is installed,
    and two of 0.0.42's refusals are gone in 0.0.50 (the README's catalogue has both columns).
    """
    raise NotImplementedError("write predict_verdict(): the lowering's rules first, then the compiler's")
