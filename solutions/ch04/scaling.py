"""How a compiled program's memory traffic grows: cost analysis and a power-law fit.

`compiled.cost_analysis()` is XLA's own estimate for the optimised program: a
dict with "flops", "transcendentals", "bytes accessed" and per-operand
breakdowns. "bytes accessed" sums, over every kernel, the bytes it reads and
writes: the memory traffic of the program as XLA fused it.

If a quantity y grows as c · n^p, then log y = log c + p · log n: a straight
line in log-log coordinates whose slope is the exponent. A least-squares line
through (log n, log y) estimates p from a sweep of sizes, and is robust to a
lower-order term (a linear q, k, v read beside an N² score matrix) in a way that
the ratio of two points is not.
"""

import jax
import numpy as np


def bytes_accessed(fn, *args) -> float:
    """XLA's "bytes accessed" for jax.jit(fn) compiled on these arguments."""
    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per device program
        analysis = analysis[0]
    return float(analysis["bytes accessed"])


def fit_exponent(ns, values) -> float:
    """p in values ≈ c · ns**p: the least-squares slope of log(values) against log(ns)."""
    slope, _ = np.polyfit(np.log(np.asarray(ns, dtype=np.float64)),
                          np.log(np.asarray(values, dtype=np.float64)), 1)
    return float(slope)
