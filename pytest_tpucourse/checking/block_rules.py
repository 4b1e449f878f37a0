"""A learner's block rule against the TPU lowering: `fn(array_shape, block_shape, dtype)` returns
None exactly where the lowering (readers/blockspecs.py) accepts the block, and says why where
it does not. Where asked, the real compiler (compiler/block_verdict.py) says what it makes of a
block the rule refused but the lowering took.
"""

from __future__ import annotations

from ..chips import Chip
from ..core.outcomes import WrongResult
from ..grading.context import resolve_chip
from ..readers.blockspecs import explain, lowering_error, native_tile


def assert_rule_matches_lowering(fn, triples, *, note: str = "", compiler: Chip | str | None = None) -> None:
    """fn(array_shape, block_shape, dtype) -> reason | None must agree with the TPU lowering
    on every (array_shape, block_shape, dtype) triple: None exactly where it lowers, a
    non-empty reason (a str) exactly where it does not.

    compiler: a chip (a Chip or a name the run knows) whose real compiler (the tpu-compile extra)
    is asked about the blocks the lowering accepts and fn refuses, so that the failure says what
    a dtype's tile really decides: whether the compiler, later, takes the block; None asks none.
    """
    from ..readers.reproduction import reproduction

    compiler = None if compiler is None else resolve_chip(compiler)

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


def _compiler_note(array_shape, block_shape, dtype, chip: Chip) -> str:
    """What the real compiler makes of a block the lowering accepts, for a rule that refused it."""
    from ..compiler import libtpu
    from ..compiler.block_verdict import compiler_verdict, refusal

    error = compiler_verdict(tuple(array_shape), tuple(block_shape), dtype, chip)
    rows, lanes = native_tile(dtype)
    if error is None:
        return (f" The {chip.name} compiler (libtpu {libtpu.libtpu_version()}) compiles it too: "
                f"({rows}, {lanes}) is how {dtype} values fill a vreg, its native tile, not a legality rule.")
    tiling = (" That is the compiler's tiling, checked after the lowering; check_block answers for the "
              "lowering's rule." if error.kind == "tiling" else "")
    return f" The {chip.name} compiler refuses it, {refusal(error, dtype)}.{tiling}"
