"""Exercise ch07.vregs: how many vregs a vector value takes, and how much of them is padding.

A vreg holds 8 sublanes x 128 lanes of 32 bits. Write vregs() and padding_waste()
for a value of shape (..., S, L) laid out in tiles of (rows, lanes) elements.
"""

import math

import numpy as np


def vregs(shape: tuple, dtype, tiling: tuple | None = None) -> int:
    """The number of vregs a value of `shape` (rank >= 2) and `dtype` takes.

    tiling: the (rows, lanes) tile of the layout, as Mosaic prints it in
    `#tpu.vpad<"bits,{0,0},(rows,lanes)">`; None means the dtype's native tile,
    (8 * packing, 128) with packing = 32 // bits (1 for 32-bit, 2 for 16-bit, 4 for 8-bit).
    Every leading dimension is its own stack of vregs; a partly filled vreg counts whole.
    """
    raise NotImplementedError("write vregs(): prod(leading) x tiles down S x vregs across L")


def padding_waste(shape: tuple, dtype, tiling: tuple | None = None) -> float:
    """The fraction of those vregs' element slots (1024 * packing per vreg) that hold no element."""
    raise NotImplementedError("write padding_waste(): 1 - elements / element slots of vregs()")
