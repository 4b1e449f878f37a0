"""Exercise ch08.vmem: the VMEM a pipelined kernel occupies (README: "VMEM: what a kernel keeps on chip")."""


def vmem_footprint(blocks, scratch=()) -> int:
    """Bytes of VMEM a Pallas TPU kernel needs, as an int.

    blocks: one (block_shape, dtype, buffers) per input and output block, the shape as
    the kernel sees it (at least 2-D; squeezed dimensions already dropped), dtype a name
    such as "float32", "bfloat16", "int8", buffers the copies the pipeline keeps (2, or 1
    for a block fetched once). scratch: one (shape, dtype) per pltpu.VMEM scratch array,
    kept once. Each array occupies its shape padded: the last dimension to a multiple of
    128, the one before to a multiple of 8 (below 8 rows: the next power of two, and no
    fewer rows than 4 // itemsize); leading dimensions multiply.
    """
    raise NotImplementedError("write vmem_footprint(): pad each array to the VMEM tiling, times its buffers")
