"""The timed inputs of a gate call and the checks on them: how many input sets rotate, an
implementation's outputs against its reference's, several implementations on inputs of their own
timed in the same rounds, and a Timing's method as its row states it."""

from __future__ import annotations

from ..core.outcomes import RAISED_BY_GRADED_CODE
from . import judge, stats
from . import records as rec

INPUT_SETS = 3  # input sets each implementation is timed on, rotating


def timed_fields(timing) -> dict:
    """How a Timing was taken, as its row says it (records.TIMING_METHODS).

    A harness that does not say timed wall-calls, the only method there was before. The
    dispatch_bound of a device-trace time is the judge's rule applied to the Timing's own wall
    time per call and median, so the row always survives re-judging.
    """
    method = getattr(timing, "method", rec.ASSUMED_TIMING)
    wall = getattr(timing, "wall_per_call", None)  # one per sample: the row keeps their median
    if isinstance(wall, (tuple, list)):
        wall = stats.median(wall) if wall else None
    wall = None if wall is None else float(wall)
    if method == "device-profiler" and wall is not None:
        bound = judge.dispatch_bound(wall, timing.summary.median)
    else:
        bound = bool(getattr(timing, "dispatch_bound", False))
    return dict(timed_by=method, wall_per_call=wall, dispatch_bound=bound)


def measure_apart(harness, fns: dict, sets: dict) -> dict:
    """Gate 04's kernel and compute alone take different inputs: each is timed on its own sets,
    in the same interleaved rounds (a wrapper picks each one's operands by round)."""
    names = list(fns)
    bundles = [tuple(sets[name][i] for name in names) for i in range(INPUT_SETS)]
    wrapped = {name: (lambda fn, k: (lambda *bundle: fn(*bundle[k])))(fns[name], k) for k, name in enumerate(names)}
    return harness.measure(wrapped, bundles)


def wrong_output(name: str, fn, input_sets, expected, dtype: str) -> str | None:
    """Why fn's outputs on these inputs are not its reference's (values only), or None.

    The bound is twice the tolerance rule's ceiling for the output's dtype: a kernel and a
    floor each within the rule of the float64 truth are within twice it of each other. It
    catches zeros, garbage and another input's answer, not a last-bit difference.
    """
    import jax
    import numpy as np

    from ..core import tolerance

    for i, (args, want) in enumerate(zip(input_sets, expected)):
        try:
            got = jax.block_until_ready(fn(*args))
        except RAISED_BY_GRADED_CODE as error:  # the learner's kernel
            # at the timed size; a kernel that calls pytest.skip() fails its check, it is not skipped
            return f"{name} raised {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        got_leaves, got_tree = jax.tree.flatten(got)
        want_leaves, want_tree = jax.tree.flatten(want)
        if got_tree != want_tree:
            return f"{name} returned {got_tree}, expected {want_tree} (input set {i})"
        for j, (g, w) in enumerate(zip(got_leaves, want_leaves)):
            g, w = np.asarray(g), np.asarray(w)
            what = f"{name} output {j} on input set {i}"
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"{what} is {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
            if not np.issubdtype(w.dtype, np.floating) and w.dtype.name != "bfloat16":
                if not np.array_equal(g, w):
                    return f"{what} differs from its reference"
                continue
            bound = 2 * tolerance.CEILING.get(w.dtype.name, 1e-2)
            error = tolerance.relative_error(g.astype(np.float64), w.astype(np.float64))
            if not error <= bound:
                return (f"{what} is wrong at the timed size: relative error {error:.3g} against its reference "
                        f"(bound {bound:.0e})")
    return None

