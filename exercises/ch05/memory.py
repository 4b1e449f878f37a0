"""Exercise ch05.memory: XLA's scratch allocation for a compiled program.

temp_bytes(fn, *args): compile jax.jit(fn) for these arguments (arrays or
jax.ShapeDtypeStruct) and return the temp (scratch) bytes XLA's buffer
assignment reserves: Compiled.memory_analysis().temp_size_in_bytes, as an int.
"""

import jax


def temp_bytes(fn, *args) -> int:
    """XLA's temp (scratch) allocation, in bytes, for jax.jit(fn) compiled on these arguments."""
    raise NotImplementedError("write temp_bytes(): lower, compile, then ask memory_analysis()")
