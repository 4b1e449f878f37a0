"""Checks a graded test applies to what the learner's code returned.

The value check is differential: the learner's output against a reference
computed in float64 from the same (already dtype-rounded) inputs. The metric is
the relative Frobenius error ||out - ref|| / ||ref||, after rounding the
reference to the output dtype: a correct kernel then differs from it by far
less than one rounding step, while accumulating in the wrong precision does not
(findings: a bf16 matmul with an f32 accumulator is 3e-5 from the rounded
reference at K=512, one with a bf16 accumulator 3e-3).
"""

from __future__ import annotations

import numpy as np

from .outcomes import WrongResult

# Relative Frobenius error allowed against the reference rounded to the output
# dtype. bf16: the course's "1e-3 forward" (a quarter of one bf16 rounding step,
# 2^-8); f32: 1e-4 leaves room for any summation order while a biased/unbiased
# variance swap at N=512 (1e-3) still fails.
DEFAULT_TOLERANCE = {
    "float32": 1e-4,
    "bfloat16": 1e-3,
    "float16": 1e-3,
    "float64": 1e-10,
}


def tolerance_for(dtype) -> float:
    name = np.dtype(dtype).name
    if name not in DEFAULT_TOLERANCE:
        raise ValueError(f"no default tolerance for dtype {name}; pass tol= explicitly")
    return DEFAULT_TOLERANCE[name]


def assert_close(actual, expected, *, fn, dtype, tol: float | None = None,
                 what: str = "output", repro: str = "") -> None:
    """Fail with a WrongResult unless `actual` matches the float64 `expected`.

    fn: the LearnerFunction that produced `actual` (named in every message).
    dtype: the dtype the output must have (references are float64, so always given).
    tol: relative Frobenius bound (default: by output dtype).
    repro: a one-line reproducer appended to failures (shapes, dtype, seed).
    """
    name = f"{fn.display}: {what}"
    suffix = f"\n  reproduce: {repro}" if repro else ""
    expected = np.asarray(expected)
    want_dtype = np.dtype(dtype)

    if not hasattr(actual, "shape") or not hasattr(actual, "dtype"):
        raise WrongResult(
            f"{name} should be an array of shape {expected.shape} and dtype "
            f"{want_dtype.name}, got {type(actual).__name__}.{suffix}"
        )
    if tuple(actual.shape) != tuple(expected.shape):
        raise WrongResult(
            f"{name} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}.{suffix}"
        )
    if np.dtype(actual.dtype) != want_dtype:
        raise WrongResult(
            f"{name} has dtype {np.dtype(actual.dtype).name}, expected {want_dtype.name}.{suffix}"
        )

    got = np.asarray(actual).astype(np.float64)
    ref = expected.astype(want_dtype).astype(np.float64)  # what a perfect kernel returns
    bad = ~np.isfinite(got) & np.isfinite(ref)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        kinds = "NaN" if np.isnan(got[bad]).all() else "NaN/Inf"
        raise WrongResult(
            f"{name} has {int(bad.sum())} {kinds} values of {got.size} (first at {list(first)}), "
            f"where the reference is finite.\n  Under TPU interpret mode uninitialised memory reads "
            f"NaN: a block never written, or a scratch buffer read before it is set.{suffix}"
        )
    if ref.size == 0:
        return
    bound = tolerance_for(want_dtype) if tol is None else tol
    finite = np.isfinite(ref)
    diff = np.where(finite, got - ref, 0.0)
    norm = np.linalg.norm(np.where(finite, ref, 0.0))
    error = np.linalg.norm(diff) / (norm if norm > 0 else 1.0)
    if not error <= bound:
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(diff)), diff.shape))
        raise WrongResult(
            f"{name} is wrong: relative error {error:.2e} > {bound:.0e} "
            f"(||out - ref|| / ||ref||, {want_dtype.name}).\n"
            f"  worst element {list(worst)}: got {got[worst]:.6g}, expected {ref[worst]:.6g}"
            f"{suffix}"
        )


def count_pallas_calls(closed_jaxpr) -> int:
    """How many pallas_calls a traced program runs (nested jaxprs included)."""
    return sum(1 for eqn in _all_eqns(closed_jaxpr.jaxpr) if eqn.primitive.name == "pallas_call")


def primitives_outside_kernels(closed_jaxpr) -> list[str]:
    """Primitive names a traced program runs outside any pallas_call body."""
    return [eqn.primitive.name for eqn in _all_eqns(closed_jaxpr.jaxpr)]


def _all_eqns(jaxpr):
    """Every equation, descending into sub-jaxprs but not into pallas_call bodies."""
    from jax.extend import core as jex_core

    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "pallas_call":
            continue
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else (param,):
                if isinstance(sub, jex_core.ClosedJaxpr):
                    yield from _all_eqns(sub.jaxpr)
                elif isinstance(sub, jex_core.Jaxpr):
                    yield from _all_eqns(sub)


# Primitives that move or relabel data without computing on it: a wrapper around
# one kernel may use these, and nothing else, outside the kernel.
LAYOUT_PRIMITIVES = frozenset({
    "pallas_call", "reshape", "broadcast_in_dim", "convert_element_type", "squeeze",
    "expand_dims", "copy", "copy_p", "pjit", "jit", "closed_call",
})


def assert_one_kernel(fn, *args, **kwargs) -> None:
    """Fail unless fn(*args, **kwargs) runs exactly one pallas_call and no math outside it."""
    closed = fn.jaxpr(*args, **kwargs)
    count = count_pallas_calls(closed)
    outside = sorted(set(primitives_outside_kernels(closed)) - LAYOUT_PRIMITIVES)
    if count != 1 or outside:
        found = f"{count} pallas_call(s)" + (f" and {', '.join(outside)} outside them" if outside else "")
        raise WrongResult(
            f"{fn.display} must be one Pallas kernel with all of its arithmetic inside "
            f"(one HBM write of the result); its jaxpr has {found}."
        )
