"""Exercise ch07.mosaic_reader: read a Pallas kernel's Mosaic module, as text.

Write read_kernel(text): given the Mosaic module of one pallas_call (the MLIR text
`pytest_tpucourse.readers.mosaic.kernels(fn, *args)` decodes from the TPU lowering, before
the compiler lays anything out), return what the kernel function says about
itself. The README's first section walks through one such text.
"""

import re
from collections import Counter


def read_kernel(text: str) -> dict:
    """The kernel function of a Mosaic module's text, as a dict with these keys:

    name                 the kernel function's name (`func.func @name`), a str
    grid                 `iteration_bounds`, a tuple of ints (() when empty)
    dimension_semantics  a tuple of "parallel" / "arbitrary", one per grid axis
    windows              one entry per operand (inputs, then outputs), in `window_params`
                         order: the `window_bounds` as a tuple of ints (a squeezed, None,
                         block dimension is there as 1), or None for an entry `{}` (an
                         operand with no window: pl.ANY)
    scalar_prefetch      the `scalar_prefetch` count, an int
    scratch              one (shape, element type, memory space) per scratch ref: the last
                         `scratch_operands` arguments, e.g. ((128, 1), "f32", "vmem"),
                         ((2,), "!tpu.dma_semaphore", "semaphore_mem"), ((), "!tpu.semaphore",
                         "semaphore_mem")
    op_counts            {op name: how many} over the kernel function's body, nested regions
                         (scf.if, scf.for) included, the index-map functions excluded: every
                         line `%x = dialect.op ...` or `dialect.op ...`, and the generic form
                         `"dialect.op"(...)` of ops without a custom syntax

    The module may hold other functions (`@transform_0`, ...: the index maps); the
    kernel is the one whose attributes hold `iteration_bounds` or `window_params`.
    """
    raise NotImplementedError("write read_kernel(): find the kernel func.func, then read its signature and attributes")
