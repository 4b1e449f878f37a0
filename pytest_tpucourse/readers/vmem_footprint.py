"""How many bytes of VMEM a Pallas TPU kernel occupies: its pipelined blocks and its scratch.

Every input and output block lives in VMEM in `count` buffers (the pipeline fetches the
next block while the kernel works on the current one), every `pltpu.VMEM` scratch
buffer once. Each buffer occupies its shape padded to the memory's tiling:

  - the last dimension (lanes) to a multiple of 128;
  - the second-to-last (sublanes) to a multiple of 8, whatever the dtype; one shorter
    than 8 only to the next power of two, and never below the rows one 32-bit sublane
    packs (1 for 4-byte types, 2 for bf16, 4 for int8);
  - leading dimensions multiply.

Buffers per block: the count a BlockSpec asks for (`pipeline_mode=pl.Buffered(n)`),
else 1 when the block index never changes over the grid (a block fetched once, every
block of a one-step grid) and 2 otherwise. Blocks left in HBM (`memory_space=pl.ANY`)
and SMEM take no VMEM.

The rule reproduces every figure the Mosaic compiler printed in its E1001 "scoped
allocation with size ..." errors for the kernels in tests/test_vmem_footprint.py
(libtpu 0.0.42.1, v5e and v6e, compiled ahead of time on a CPU). The compiler may add
a little internal scratch of its own (0.04 MiB for a bf16 block of 2 or 3 rows), which
the model leaves out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import block_skipping, traced_program
from ..core import jax_internals

LANES = 128
SUBLANES = 8
VMEM_SPACES = ("default", "vmem")  # where blocks and scratch of a TPU kernel live


def padded_rows(rows: int, itemsize: int) -> int:
    """The sublanes an array of `rows` rows occupies."""
    if rows >= SUBLANES:
        return math.ceil(rows / SUBLANES) * SUBLANES
    packed = max(1, 4 // itemsize)  # rows one 32-bit sublane holds
    return max(packed, 1 << max(rows - 1, 0).bit_length())


def padded_bytes(shape, dtype) -> int:
    """Bytes one VMEM buffer of this shape and dtype occupies (a rank-1 shape is one row)."""
    itemsize = _itemsize(dtype)
    shape = (1, 1, *(int(d) for d in shape))[-max(len(shape), 2):]
    *leading, rows, lanes = shape
    return (math.prod(leading) * padded_rows(rows, itemsize) * math.ceil(lanes / LANES) * LANES
            * itemsize)


@dataclass(frozen=True)
class Buffer:
    """One block or scratch array a kernel keeps in VMEM, `count` times."""

    name: str  # "input 0", "output 0", "scratch 0"
    shape: tuple[int, ...]  # as the kernel sees it (squeezed dimensions dropped)
    dtype: str
    count: int

    @property
    def nbytes(self) -> int:
        return self.count * padded_bytes(self.shape, self.dtype)


def footprint_bytes(buffers) -> int:
    """Total VMEM bytes of a kernel's buffers."""
    return sum(b.nbytes for b in buffers)


def kernel_buffers(closed_jaxpr) -> list[list[Buffer]]:
    """The VMEM buffers of every pallas_call in a traced program, one list per kernel."""
    return [_buffers(eqn) for eqn in traced_program.pallas_call_eqns(closed_jaxpr)]


def _buffers(eqn) -> list[Buffer]:
    kernel = jax_internals.kernel_grid(eqn)
    buffers = []
    for block in kernel.inputs + kernel.outputs:
        if block.memory_space not in VMEM_SPACES:
            continue
        buffers.append(Buffer(block.name, block.block_value_shape, _name(block.dtype),
                              _count(block, kernel)))
    for i, (shape, dtype, space) in enumerate(jax_internals.scratch_avals(eqn)):
        if space == "vmem":
            buffers.append(Buffer(f"scratch {i}", shape, _name(dtype), 1))
    return buffers


def _count(block: jax_internals.OperandBlocks, kernel: jax_internals.KernelGrid) -> int:
    if block.buffer_count:
        return block.buffer_count
    if not kernel.static:
        # Index maps that read scalar-prefetch operands cannot be evaluated here: assume the
        # block changes (two buffers), which can only over-count.
        return 2
    indices = block_skipping.block_indices(block, kernel.grid)
    return 1 if len(indices) <= 1 or not np.any(indices[1:] != indices[:-1]) else 2


def _name(dtype) -> str:
    import jax.numpy as jnp

    return jnp.dtype(dtype).name


def _itemsize(dtype) -> int:
    import jax.numpy as jnp

    return jnp.dtype(dtype).itemsize
