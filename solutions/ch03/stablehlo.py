"""StableHLO text of a JAX function.

`jax.jit(fn).lower(*args)` traces fn (the jaxpr of chapter 2) and lowers it to
StableHLO, the versioned MLIR dialect every ML framework can emit and every
compiler (XLA, IREE, ...) can read; `.as_text()` prints that module. It is the
program *before* XLA optimises it: one op or a few per primitive, nothing fused.
`.compile().as_text()` would print XLA's optimised HLO instead (chapter 4).
"""

import jax


def stablehlo_text(fn, *args) -> str:
    """The StableHLO module (MLIR text) of jax.jit(fn) lowered for these arguments."""
    return jax.jit(fn).lower(*args).as_text()
