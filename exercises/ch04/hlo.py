"""Exercise ch04.hlo: XLA's optimised HLO, and how many fusions it holds.

optimized_hlo(fn, *args): the HLO module text XLA produces when it compiles
jax.jit(fn) for these arguments (it starts "HloModule" and has an ENTRY
computation), not the StableHLO of chapter 3.

count_fusions(hlo_text): how many fusion *instructions* the module runs, the
lines `%name = <shape> fusion(...)`. Not the fused computations
(`%fused_computation.3 (...) -> ... {`), which are their bodies. A shape may be
a tuple `(f32[8]{0}, f32[8]{0})` (a multi-output fusion), layouts may carry
tiles `{1,0:T(8,128)(2,1)}`, and operands may be printed with their shapes.
"""

import re

import jax


def optimized_hlo(fn, *args) -> str:
    """XLA's optimised HLO module (text) for jax.jit(fn) compiled on these arguments."""
    raise NotImplementedError("write optimized_hlo(): lower, compile, then print as text")


def count_fusions(hlo_text: str) -> int:
    """The number of fusion instructions (kernels XLA built by fusing ops) in an HLO module."""
    raise NotImplementedError("write count_fusions(): a regex for '%name = <shape> fusion(' lines")
