"""How much scratch memory a compiled program needs: XLA's buffer assignment.

After fusion XLA assigns every intermediate that must live in memory to a
buffer. `compiled.memory_analysis()` reports the totals: arguments, outputs,
aliased bytes and `temp_size_in_bytes`, the scratch space for everything in
between. A program that materialises an (S, S) matrix needs O(S²) temp bytes;
streaming attention needs one (Sq, block_k) block of scores and the (m, l, acc)
carry: O(S). Unlike "bytes accessed" (chapter 4), which counts traffic, this
measures what must exist at once, which is exactly the question "is there an
N² buffer?".
"""

import jax


def temp_bytes(fn, *args) -> int:
    """XLA's temp (scratch) allocation, in bytes, for jax.jit(fn) compiled on these arguments."""
    return int(jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes)
