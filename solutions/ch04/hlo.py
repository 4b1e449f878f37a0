"""XLA's optimised HLO, and how many fusions it holds.

`jax.jit(fn).lower(*args).compile()` runs XLA's pipeline on the StableHLO of
chapter 3: simplification, layout assignment, fusion, scheduling. `.as_text()`
prints the result as an HLO module: one `ENTRY` computation (the program), plus
the computations it calls. A fusion appears twice in that text:

    %fused_computation.3 (param_0: f32[256,512]) -> f32[256,512] { ... }     the body
    %multiply_fusion = f32[256,512]{1,0} fusion(%x.1), kind=kLoop, calls=%fused_computation.3

The first is a *computation* (what the fused kernel computes), the second the
*instruction* that runs it: one kernel launch, reading its operands from memory
once and writing its result once. We count instructions: a line `%name = <shape>
fusion(...)`, where the shape may be a tuple `(f32[8]{0}, f32[8]{0})` for a
multi-output fusion and the operands may carry their own shapes (TPU dumps).
"""

import re

import jax

_FUSION_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[^=\n]*?\sfusion\(", re.MULTILINE)


def optimized_hlo(fn, *args) -> str:
    """XLA's optimised HLO module (text) for jax.jit(fn) compiled on these arguments."""
    return jax.jit(fn).lower(*args).compile().as_text()


def count_fusions(hlo_text: str) -> int:
    """The number of fusion instructions (kernels XLA built by fusing ops) in an HLO module."""
    return len(_FUSION_INSTRUCTION.findall(hlo_text))
