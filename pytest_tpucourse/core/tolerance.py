"""The tolerance rule: how far from the float64 oracle a correct result may be.

    error(x) = ||x - R|| / ||R||      (relative Frobenius error, per output or grad)
    R        = the float64 oracle, computed from the same dtype-rounded inputs,
               then rounded to the output's dtype (what a perfect kernel returns)
    bound    = min(error(floor) + margin[kind][dtype], ceiling[dtype])

`floor` is the plain XLA implementation run on the same inputs, on the same
backend, at the course's precision contract (references.py): a kernel may be
as far from the oracle as that accepted implementation already is, plus a
margin for what the floor does not do (another summation order, intermediates
rounded inside a fused kernel). The ceiling keeps a floor that is itself
imprecise on some backend from opening the bound without limit.

Margins, in bf16: 1e-3 forward (the course's "1e-3 forward": a quarter of
bf16's unit roundoff, the most one rounding errs, 2^-8 = 3.9e-3) and 2e-3 for grads. The course's "1e-2
grads" is the ceiling rather than the margin: as a margin it accepts a fully
bf16 attention backward (dq 6.5e-3 against a floor of 2.7e-3). Twice the
floor's error, as Tri Dao's flash-attention tests allow for a max-abs metric,
accepts the fully bf16 forward too (5.0e-3 against 2 x 2.5e-3 + 1e-3).
Evidence: docs/checking.md ("The tolerance rule"), printed by bench/tolerance_evidence.py.
"""

from __future__ import annotations

import math

import numpy as np

FLOOR_FACTOR = 1.0

BASE = {
    "forward": {"float64": 1e-12, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-3},
    "grad": {"float64": 1e-10, "float32": 1e-4, "float16": 2e-3, "bfloat16": 2e-3},
}

CEILING = {"float64": 1e-6, "float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2}


def base(dtype, kind: str = "forward") -> float:
    name = np.dtype(dtype).name
    try:
        return BASE[kind][name]
    except KeyError:
        raise ValueError(f"no {kind} tolerance for dtype {name}; pass tol= explicitly") from None


def bound(dtype, kind: str = "forward", floor_error: float = 0.0) -> float:
    return min(FLOOR_FACTOR * floor_error + base(dtype, kind), CEILING[np.dtype(dtype).name])


def rounded_reference(reference, dtype) -> np.ndarray:
    """The oracle as a perfect implementation in `dtype` would return it, in float64: each value
    rounded once, to the nearest value of `dtype` (ties to even)."""
    return round_once(np.asarray(reference, dtype=np.float64), dtype).astype(np.float64)


def round_once(values: np.ndarray, dtype) -> np.ndarray:
    """float64 `values` rounded once into `dtype`.

    NumPy rounds float64 into its own float32 and float16 once. ml_dtypes before 0.7 casts float64
    into bfloat16 and its float8s through float32, rounding twice: 1 + 2**-8 + 2**-30 became 1.0,
    where the nearest bfloat16 is 1 + 2**-7 (tests/test_tolerance.py reads it off the installed
    ml_dtypes). So those go through float32 rounded to odd (toward zero, its last bit set where that
    dropped anything), which keeps enough for one more rounding to any type of at most 22
    significant bits to be the correct one, in float32's exponent range (bfloat16's).
    """
    dtype = np.dtype(dtype)
    if dtype.type.__module__ != "ml_dtypes" or not dtype.name.startswith(("bfloat", "float")):
        return values.astype(dtype)
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as the type's own cast gives
        nearest = values.astype(np.float32)
    widened = nearest.astype(np.float64)
    # float32's bits are sign and magnitude: one step toward zero is the bits minus one, for any
    # value rounded away from zero (never 0; inf steps to the largest finite). A NaN compares
    # unequal and gets its last bit set, and stays a NaN.
    bits = nearest.view(np.uint32) - (np.abs(widened) > np.abs(values)).astype(np.uint32)
    bits |= (widened != values).astype(np.uint32)
    return bits.view(np.float32).astype(dtype)


def relative_error(got, reference) -> float:
    """||got - ref|| / ||ref|| over the entries where the reference is finite."""
    got = np.asarray(got, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    finite = np.isfinite(reference)
    diff = np.subtract(got, reference, out=np.zeros_like(got), where=finite)
    norm = _norm(np.where(finite, reference, 0.0))
    return _norm(diff) / (norm if norm > 0 else 1.0)


def _norm(values: np.ndarray) -> float:
    """The 2-norm of every entry. numpy's `linalg.norm` is a BLAS dot, whose threads spin on a
    loaded machine (7.7 ms of CPU for 512x512 entries where this takes 0.15 ms); the sum of
    squares in one pass is as exact at the tolerances the course compares against."""
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    return math.sqrt(float(np.einsum("i,i->", flat, flat)))


def judge(got, expected, dtype, kind: str = "forward", floor=None) -> tuple[float, float, float]:
    """(error, bound, floor_error) of `got` against the float64 oracle output `expected`."""
    reference = rounded_reference(expected, dtype)
    floor_error = 0.0 if floor is None else relative_error(floor, reference)
    return relative_error(got, reference), bound(dtype, kind, floor_error), floor_error
