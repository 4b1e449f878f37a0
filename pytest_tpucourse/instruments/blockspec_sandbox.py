"""The BlockSpec sandbox (`tpucourse blockspec`, the site's EX·09): one block over one array.

The verdict of the TPU lowering in the course's words (readers/blockspecs.py), the real
compiler's on the same one-block copy kernel where the tpu-compile extra is installed
(compiler/block_verdict.py), the grid that covers the array, the padding of the ragged
edge blocks, and the VMEM one buffer of the block takes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..compiler.block_verdict import COMPILER_CHIP, compiler_verdict, refusal
from ..readers.blockspecs import SUBLANES, explain, lowering_error, native_tile


@dataclass(frozen=True)
class BlockReport:
    array_shape: tuple[int, ...]
    block_shape: tuple
    dtype: str
    error: str | None  # the lowering's own message, None when it lowers
    grid: tuple[int, ...]
    edges: tuple[tuple[int, int, int], ...]  # per axis: (block, elements in the last block, padding)
    buffer_bytes: int  # the block's elements times the itemsize
    tiled_bytes: int | None  # one buffer as VMEM holds it (vmem_footprint.padded_bytes: the compiler's padding)
    compiler: str = ""  # the real compiler's verdict on the same copy kernel (compiler_line)
    compiled: bool | None = None  # that verdict: True compiles, False refused, None not asked

    @property
    def headline(self) -> str:
        """The verdict in one line: the lowering's refusal, else the compiler's, else legal."""
        if self.error is not None:
            return "illegal: " + explain(self.array_shape, self.block_shape, self.dtype, self.error)
        if self.compiled is False:
            return f"refused by the {self.compiler} (the TPU lowering accepts it)"
        if self.compiled:
            return "legal: the TPU lowering accepts it and the compiler compiles it"
        return "legal: the TPU lowering accepts it"

    def lines(self) -> list[str]:
        shape = "x".join(map(str, self.array_shape))
        block = "x".join("None" if b is None else str(b) for b in self.block_shape)
        steps = math.prod(self.grid)
        cdivs = " x ".join(f"cdiv({a}, {e[0]})" for a, e in zip(self.array_shape, self.edges))
        out = [f"array   {shape} {self.dtype}, block {block}",
               f"verdict {self.headline}",
               *([self.compiler] if self.compiler else []),
               f"grid    {self.grid}: {cdivs} = {steps} step{'s' * (steps != 1)}"]
        for axis, (size, last, padding) in enumerate(self.edges):
            if padding:
                out.append(f"ragged  axis {axis}: the last block holds {last} of {size}; {padding} "
                           f"padding (read: unspecified values, NaN in TPU interpret mode; written: "
                           f"masked)")
        if not any(padding for _, _, padding in self.edges):
            out.append("ragged  none: every block lies inside the array")
        itemsize = self.buffer_bytes // max(1, math.prod(e[0] for e in self.edges))
        elements = " x ".join(str(e[0]) for e in self.edges)
        out.append(f"VMEM    {self.buffer_bytes:,} bytes per buffer ({elements} x {itemsize} bytes); "
                   f"a pipelined operand has 2 buffers: {2 * self.buffer_bytes:,} bytes")
        if self.tiled_bytes is not None and self.tiled_bytes != self.buffer_bytes:
            out.append(f"        padded as VMEM holds it: {self.tiled_bytes:,} bytes per buffer (chapter 8's VMEM "
                       f"model, which matches the compiler's E1001 counts)")
        rows, lanes = native_tile(self.dtype)
        if self.error is None and len(self.block_shape) >= 2 and rows != SUBLANES:
            sizes = [1 if b is None else b for b in self.block_shape]
            if sizes[-2] % rows and sizes[-2] != self.array_shape[-2]:
                out.append(f"note    {self.dtype}'s native tile is ({rows}, {lanes}): {sizes[-2]} rows "
                           f"lower, but fill part of a tile; {self._whose_call()}")
        return out

    def _whose_call(self) -> str:
        """Whether a block of part-tiles compiles is the compiler's call, and releases differ."""
        releases = ("libtpu releases differ: v5e's int8 (8, 128) block of a (32, 128)-tiled array is "
                    "refused by 0.0.42 (E2002) and compiled by 0.0.50 (exercises/ch07/README.md)")
        if self.compiled is None:
            return f"the Mosaic compiler decides whether it compiles (no verdict of it here), and {releases}"
        answer = "compiles it" if self.compiled else "refuses it"
        return f"the Mosaic compiler decides: the installed one {answer} (the compiler line), and {releases}"


def sandbox(array_shape, block_shape, dtype, *, compiler: bool = True) -> BlockReport:
    """The sandbox's report; compiler=False leaves the real compiler out (the lowering's rules only)."""
    import jax.numpy as jnp

    array_shape, block_shape = tuple(array_shape), tuple(block_shape)
    if len(array_shape) != len(block_shape):
        raise ValueError(f"the block {block_shape} and the array {array_shape} differ in rank")
    for size in (*array_shape, *[b for b in block_shape if b is not None]):
        if not (isinstance(size, int) and size > 0):
            raise ValueError(f"shapes take positive sizes, got {size!r}")
    dtype = jnp.dtype(dtype).name
    sizes = tuple(1 if b is None else b for b in block_shape)
    grid = tuple(-(-a // b) for a, b in zip(array_shape, sizes))
    edges = tuple((b, a - (g - 1) * b, g * b - a) for a, b, g in zip(array_shape, sizes, grid))
    itemsize = jnp.dtype(dtype).itemsize
    buffer_bytes = math.prod(sizes) * itemsize
    from ..readers import vmem_footprint

    tiled = vmem_footprint.padded_bytes(sizes, dtype) if len(sizes) >= 2 else None
    lowering = lowering_error(array_shape, block_shape, dtype)
    line, compiled = compiler_answer(array_shape, block_shape, dtype, lowering) if compiler else ("", None)
    return BlockReport(array_shape, block_shape, dtype, lowering, grid, edges, buffer_bytes, tiled, line, compiled)


def compiler_line(array_shape, block_shape, dtype, lowering: str | None, chip: str = COMPILER_CHIP) -> str:
    """The sandbox's line for the real compiler's verdict on the one-block copy kernel."""
    return compiler_answer(array_shape, block_shape, dtype, lowering, chip)[0]


def compiler_answer(array_shape, block_shape, dtype, lowering: str | None,
                    chip: str = COMPILER_CHIP) -> tuple[str, bool | None]:
    """(compiler_line, True if it compiles / False if it refuses / None if it was not asked)."""
    from ..compiler import libtpu

    if not libtpu.available():
        return 'compiler: not checked (pip install -e ".[tpu-compile]")', None
    head = f"compiler {chip}:"
    if lowering is not None:
        return f"{head} not asked: the lowering rejects the block first", None
    error = compiler_verdict(tuple(array_shape), tuple(block_shape), dtype, chip)
    if error is None:
        return (f"{head} compiles (libtpu {libtpu.libtpu_version()}, ahead of time: a kernel copying "
                f"one block; nothing ran)"), True
    if error.kind == "timeout":  # no verdict: the compile was stopped
        return f"{head} no verdict: {error.message}", None
    return f"{head} {refusal(error, dtype)}", False


def parse_block(text: str) -> tuple:
    """'128x128' -> (128, 128); 'Nonex128' or '_x128' -> (None, 128)."""
    dims = []
    for part in re.split(r"[x,]", text.strip().lower()):
        if part in ("none", "_", "-"):
            dims.append(None)
        elif part.isdigit() and int(part) > 0:
            dims.append(int(part))
        else:
            raise ValueError(f"a block is sizes or None joined by 'x' (128x128, Nonex128), got {text!r}")
    return tuple(dims)
