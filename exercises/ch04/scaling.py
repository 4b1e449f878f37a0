"""Exercise ch04.scaling: memory traffic from XLA's cost analysis, and a power-law fit.

bytes_accessed(fn, *args): XLA's "bytes accessed" estimate for jax.jit(fn)
compiled on these arguments (args may be arrays or jax.ShapeDtypeStruct), as a
float. Compiled.cost_analysis() returns a dict (a list of one dict in some older
JAX versions).

fit_exponent(ns, values): p such that values ≈ c · ns**p, the least-squares
slope of log(values) against log(ns), as a float. ns and values are sequences
of positive numbers of equal length (at least 2).
"""

import jax
import numpy as np


def bytes_accessed(fn, *args) -> float:
    """XLA's "bytes accessed" for jax.jit(fn) compiled on these arguments."""
    raise NotImplementedError("write bytes_accessed(): jax.jit(fn).lower(*args).compile().cost_analysis()")


def fit_exponent(ns, values) -> float:
    """p in values ≈ c · ns**p: the least-squares slope of log(values) against log(ns)."""
    raise NotImplementedError("write fit_exponent(): a straight line through (log n, log value)")
