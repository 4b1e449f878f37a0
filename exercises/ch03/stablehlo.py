"""Exercise ch03.stablehlo: the StableHLO text of a JAX function.

Return the StableHLO module (MLIR text, starting `module @...`) that jax.jit(fn)
lowers to for these arguments: the program before XLA optimises it, not the
compiled HLO (no .compile()).
"""

import jax


def stablehlo_text(fn, *args) -> str:
    """The StableHLO module (MLIR text) of jax.jit(fn) lowered for these arguments."""
    raise NotImplementedError("write stablehlo_text(): jax.jit(fn).lower(*args), then print it as text")
