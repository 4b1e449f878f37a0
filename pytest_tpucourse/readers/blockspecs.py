"""BlockSpecs on a CPU: what the TPU lowering says about a block, and what the block costs.

Neither interpreter checks a block's shape; Pallas' TPU (Mosaic) lowering does, and it
runs on a CPU (`lowering_platforms=("tpu",)`, about 10 ms a block). `lowering_error`
asks it about one block of one array, through a kernel that copies that block, so a
block rule written by hand can be judged against the real thing
(`assert_rule_matches_lowering`). `sandbox` is the `tpucourse blockspec` command: the
verdict in the course's words, the grid that covers the array, the padding of the
ragged edge blocks, and the VMEM one buffer of the block takes.

The lowering checks the (8, 128) rule for every dtype alike. Dtype-specific tiles
((16, 128) for bf16, (32, 128) for int8) and the scoped VMEM limit are the Mosaic
compiler's business: on a TPU, or with libtpu's ahead-of-time compiler (the
tpu-compile extra), which `compiler_verdict` asks about the same copy kernel.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from ..core.outcomes import WrongResult

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
            jax.jit(_one_block_copy(array_shape, block_shape)).trace(array).lower(lowering_platforms=("tpu",))
        except Exception as error:  # the lowering's verdict, whatever its type
            return f"{type(error).__name__}: {error}"
    return None


def _one_block_copy(array_shape: tuple, block_shape: tuple):
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


COMPILER_CHIP = "v5e"


@functools.lru_cache(maxsize=1024)
def compiler_verdict(array_shape: tuple[int, ...], block_shape: tuple, dtype: str, chip: str = COMPILER_CHIP):
    """None if the real TPU compiler (libtpu, ahead of time for `chip`) compiles the same one-block
    copy kernel `lowering_error` lowers, else its TpuCompileError (kind "tiling", "vmem", ...).
    Needs the tpu-compile extra; ask only about blocks the lowering accepts."""
    import jax
    import jax.numpy as jnp

    from ..compiler import libtpu

    array = jax.ShapeDtypeStruct(tuple(array_shape), jnp.dtype(dtype))
    try:
        libtpu.compile_for(_one_block_copy(tuple(array_shape), tuple(block_shape)), array, chip=chip)
    except libtpu.TpuCompileError as error:
        return error
    return None


def compiler_line(array_shape, block_shape, dtype, lowering: str | None, chip: str = COMPILER_CHIP) -> str:
    """The sandbox's line for the real compiler's verdict on the one-block copy kernel."""
    from ..compiler import libtpu

    if not libtpu.available():
        return 'compiler: not checked (pip install -e ".[tpu-compile]")'
    head = f"compiler {chip}:"
    if lowering is not None:
        return f"{head} not asked: the lowering rejects the block first"
    error = compiler_verdict(tuple(array_shape), tuple(block_shape), dtype, chip)
    if error is None:
        return (f"{head} compiles (libtpu {libtpu.libtpu_version()}, ahead of time: a kernel copying "
                f"one block; nothing ran)")
    return f"{head} {_refusal(error, dtype)}"


def _refusal(error, dtype) -> str:
    """The compiler's refusal of the one-block copy kernel, in a line: its code, then why."""
    code = error.code or error.kind
    if error.kind == "tiling":
        return (f"{code}: the block {_dims(error.block_shape[-2:])} is neither a multiple of {dtype}'s "
                f"tiling {_dims(error.tiling)} nor the array's full extent")
    if error.kind == "vmem":
        return (f"{code}: the copy kernel needs {error.vmem_needed_bytes / 2 ** 20:.2f} MiB of VMEM (input "
                f"and output block, one buffer each), over its scoped limit of "
                f"{error.vmem_limit_bytes / 2 ** 20:.2f} MiB")
    return f"{code}: {_first_line(error.detail)}"


def _dims(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def assert_rule_matches_lowering(fn, triples, *, note: str = "", compiler: str | None = None) -> None:
    """fn(array_shape, block_shape, dtype) -> reason | None must agree with the TPU lowering
    on every (array_shape, block_shape, dtype) triple: None exactly where it lowers, a
    non-empty reason (a str) exactly where it does not.

    compiler: a chip whose real compiler (the tpu-compile extra) is asked about the blocks
    the lowering accepts and fn refuses, so that the failure says what a dtype's tile
    really decides: whether the compiler, later, takes the block.
    """
    from .reproduction import reproduction

    for array_shape, block_shape, dtype in triples:
        call = f"{fn.display.split('(')[0]}({tuple(array_shape)}, {tuple(block_shape)}, {dtype!r})"
        said = fn(tuple(array_shape), tuple(block_shape), dtype)
        suffix = reproduction(fn, note=note)
        error = lowering_error(tuple(array_shape), tuple(block_shape), dtype)
        if said is not None and not (isinstance(said, str) and said.strip()):
            raise WrongResult(f"{fn.display}: {call} returned {said!r}; expected None (legal) "
                              f"or a non-empty str saying why the block is illegal.{suffix}")
        if error is None and said is not None:
            compiled = _compiler_note(array_shape, block_shape, dtype, compiler) if compiler else ""
            raise WrongResult(f"{fn.display}: {call} says the block is illegal ({said!r}), but "
                              f"the TPU lowering accepts it.{compiled}{suffix}")
        if error is not None and said is None:
            raise WrongResult(f"{fn.display}: {call} returned None (legal), but the TPU lowering "
                              f"rejects it: {explain(array_shape, block_shape, dtype, error)}"
                              f"{suffix}")


def _compiler_note(array_shape, block_shape, dtype, chip: str) -> str:
    """What the real compiler makes of a block the lowering accepts, for a rule that refused it."""
    from ..compiler import libtpu

    error = compiler_verdict(tuple(array_shape), tuple(block_shape), dtype, chip)
    rows, lanes = native_tile(dtype)
    if error is None:
        return (f" The {chip} compiler (libtpu {libtpu.libtpu_version()}) compiles it too: "
                f"({rows}, {lanes}) is how {dtype} values fill a vreg, its native tile, not a legality rule.")
    tiling = (" That is the compiler's tiling, checked after the lowering; check_block answers for the "
              "lowering's rule." if error.kind == "tiling" else "")
    return f" The {chip} compiler refuses it, {_refusal(error, dtype)}.{tiling}"


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
        return "; ".join(reasons) or _first_line(error)
    return _first_line(error)


def _first_line(error: str) -> str:
    return error.strip().splitlines()[0] if error.strip() else "rejected"


def _packing(dtype) -> int:
    import jax.numpy as jnp

    return max(1, 4 // jnp.dtype(dtype).itemsize)


def native_tile(dtype) -> tuple[int, int]:
    """The (rows, lanes) one vreg holds of this dtype: (8·packing, 128)."""
    return SUBLANES * _packing(dtype), LANES


# ---------------------------------------------------------------- the sandbox


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

    def lines(self) -> list[str]:
        shape = "x".join(map(str, self.array_shape))
        block = "x".join("None" if b is None else str(b) for b in self.block_shape)
        verdict = ("legal: the TPU lowering accepts it" if self.error is None else
                   "illegal: " + explain(self.array_shape, self.block_shape, self.dtype, self.error))
        steps = math.prod(self.grid)
        cdivs = " x ".join(f"cdiv({a}, {e[0]})" for a, e in zip(self.array_shape, self.edges))
        out = [f"array   {shape} {self.dtype}, block {block}",
               f"verdict {verdict}",
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
                           f"lower, but fill part of a tile; the Mosaic compiler decides whether it "
                           f"compiles (v5e: bf16 (8, 128) compiles; int8 (8, 128) does not with libtpu "
                           f"0.0.42.1 and does with 0.0.50.1)")
        return out


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
    from . import vmem_footprint

    tiled = vmem_footprint.padded_bytes(sizes, dtype) if len(sizes) >= 2 else None
    lowering = lowering_error(array_shape, block_shape, dtype)
    return BlockReport(array_shape, block_shape, dtype, lowering, grid, edges, buffer_bytes, tiled,
                       compiler_line(array_shape, block_shape, dtype, lowering) if compiler else "")


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


def main(args) -> int:
    """`tpucourse blockspec --shape 1000x384 --block 128x128 --dtype bfloat16`."""
    shape = parse_block(args.shape)
    if None in shape:
        raise ValueError(f"an array shape takes sizes only, got {args.shape!r}")
    from ..compiler import libtpu

    with libtpu.quiet_libtpu_startup():  # JAX's backends start, and libtpu with them
        import jax

        jax.devices()
    report = sandbox(shape, parse_block(args.block), args.dtype)
    print("\n".join(report.lines()))
    return 0
