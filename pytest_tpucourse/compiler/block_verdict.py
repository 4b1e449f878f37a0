"""The real TPU compiler's verdict on one block: readers/blockspecs.py's one-block copy kernel,
compiled ahead of time for a chip (libtpu, the tpu-compile extra), and its refusal in a line.

The lowering (readers/blockspecs.py) checks the (8, 128) rule for every dtype alike; a
dtype's own tile ((16, 128) for bf16, (32, 128) for int8) and the scoped VMEM limit are
checked here, later, by the compiler.
"""

from __future__ import annotations

import functools

from ..chips import DEFAULT_CHIP, Chip, get_chip
from ..readers.blockspecs import first_line, one_block_copy


@functools.lru_cache(maxsize=1024)
def compiler_verdict(array_shape: tuple[int, ...], block_shape: tuple, dtype: str, chip: Chip | None = None):
    """None if the real TPU compiler (libtpu, ahead of time for `chip`, by default the course's
    default chip) compiles the same one-block copy kernel `lowering_error` lowers, else its
    TpuCompileError (kind "tiling", "vmem", ...). Needs the tpu-compile extra; ask only about
    blocks the lowering accepts."""
    import jax
    import jax.numpy as jnp

    from . import libtpu

    array = jax.ShapeDtypeStruct(tuple(array_shape), jnp.dtype(dtype))
    try:
        libtpu.compile_for(one_block_copy(tuple(array_shape), tuple(block_shape)), array,
                           chip=chip or get_chip(DEFAULT_CHIP))
    except libtpu.TpuCompileError as error:
        return error
    return None


def refusal(error, dtype) -> str:
    """The compiler's refusal of the one-block copy kernel, in a line: its code, then why."""
    code = error.code or error.kind
    if error.kind == "tiling":
        return (f"{code}: the block {_dims(error.block_shape[-2:])} is neither a multiple of {dtype}'s "
                f"tiling {_dims(error.tiling)} nor the array's full extent")
    if error.kind == "vmem":
        return (f"{code}: the copy kernel needs {error.vmem_needed_bytes / 2 ** 20:.2f} MiB of VMEM (input "
                f"and output block, one buffer each), over its scoped limit of "
                f"{error.vmem_limit_bytes / 2 ** 20:.2f} MiB")
    return f"{code}: {first_line(error.detail)}"


def _dims(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"
