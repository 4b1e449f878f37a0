"""How many vregs a vector value takes, and how much of them is padding.

A vreg is 8 sublanes x 128 lanes x 32 bits (4 KiB). A layout cuts a value's last
two dimensions into tiles of (rows, lanes) elements; a 32-bit element fills a
lane of a sublane, a 16-bit one half of it, an 8-bit one a quarter (the
"packing": 1, 2, 4 elements per 32 bits). A vreg therefore holds
8 * 128 * packing elements: one (8 * packing, 128) tile, the dtype's native
tile, or several smaller tiles side by side along the lanes (a (8, 128) tile of
bf16 fills half a vreg, so two sit in one: the vreg covers (8, 256) elements).

Every leading dimension is a separate stack of vregs, and a partial tile still
takes a whole vreg: ceilings, not divisions.
"""

import math

import numpy as np

SUBLANES, LANES, BITS = 8, 128, 32


def packing(dtype) -> int:
    """Elements per 32-bit sublane slot: 1 for 32-bit, 2 for 16-bit, 4 for 8-bit."""
    return BITS // (np.dtype(dtype).itemsize * 8)


def vregs(shape: tuple, dtype, tiling: tuple | None = None) -> int:
    """vregs a value of `shape` (..., S, L) and `dtype` takes when laid out in `tiling` tiles."""
    if len(shape) < 2:
        raise ValueError(f"vregs() needs a value of rank 2 or more, got shape {shape}")
    pack = packing(dtype)
    rows, lanes = tiling if tiling is not None else (SUBLANES * pack, LANES)
    tiles_per_vreg = SUBLANES * LANES * pack // (rows * lanes)
    if tiles_per_vreg < 1:
        raise ValueError(f"a ({rows}, {lanes}) tile of {np.dtype(dtype).name} does not fit one vreg")
    *leading, s, l = shape
    return math.prod(leading) * -(-s // rows) * -(-l // (lanes * tiles_per_vreg))


def padding_waste(shape: tuple, dtype, tiling: tuple | None = None) -> float:
    """The fraction of those vregs' element slots that hold no element of the value."""
    capacity = vregs(shape, dtype, tiling) * SUBLANES * LANES * packing(dtype)
    return 1 - math.prod(shape) / capacity
