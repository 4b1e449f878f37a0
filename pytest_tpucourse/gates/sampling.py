"""The timed inputs of a gate call and the checks on them: how many input sets rotate and the
seeds they are drawn from, an implementation's outputs against its reference's, XLA's two
input regimes, several implementations on inputs of their own timed in the same rounds, and a
Timing as its row states it (method, N, per-op device time, MXU utilisation).

Timed inputs are drawn from seeds drawn afresh for each measurement (`draw_seeds`), when it
starts: no kernel can hold answers for inputs fixed in advance, and the outputs are checked on
those very inputs before and after timing, then on a set of a further fresh seed.
"""

from __future__ import annotations

import functools
import os

from .. import chips
from ..core.outcomes import RAISED_BY_GRADED_CODE
from . import device_ops, judge, stats
from . import records as rec
from .timer import SIZED_BY_HOST

INPUT_SETS = 3  # input sets each implementation is timed on, rotating
SEED_BITS = 31  # a drawn seed is below 2**31: numpy's and JAX's generators take it as it is
WEIGHTS_FIXED, ALL_ROTATING = rec.XLA_REGIMES  # an XLA floor's two input regimes
# The system's entropy as this module found it when imported (the session binds it before any graded
# import): graded code that replaces os.urandom, secrets or random later cannot choose the seeds.
_urandom = os.urandom


def draw_seeds(count: int) -> list[int]:
    """Seeds no code could know before the measurement: drawn from the system's entropy now."""
    return [int.from_bytes(_urandom(4), "little") >> (32 - SEED_BITS) for _ in range(count)]


def weights_fixed(fn, first_set: tuple, weights):
    """fn with the operands at the `weights` indices taken from `first_set` on every call: one
    weight array throughout, as a model's step sees it, the other operands rotating."""
    fixed = {i: first_set[i] for i in weights}

    def call(*args):
        return fn(*(fixed.get(i, a) for i, a in enumerate(args)))
    return call


def compiled_text(fn, args) -> str | None:
    """The optimized HLO of fn's one compiled program (fn a jitted function), as this backend
    compiles it for these args; None where fn is not one jitted program (a sequence of several)
    or the program cannot be shown."""
    lower = getattr(fn, "lower", None)
    if lower is None:
        return None
    try:
        return lower(*args).compile().as_text()
    except Exception:  # noqa: BLE001 - a program XLA cannot show is said as unknown, never a failure
        return None


def compile_ahead(fns: dict, args) -> dict:
    """Compile the course's and JAX's own programs (the floor, ceilings, a search's candidates) for
    these args in threads, at once: {name: Future}. XLA's compiler runs outside Python's lock, so a
    slot's programs compile side by side on the host's cores (a v5e host has 13) where one after
    another they cost a second or more each; a later call of the same jitted function finds the
    program compiled. A learner's kernel is never compiled here: its Python, traced when it compiles,
    runs on the main thread, where the run attributes and interrupts what graded code does. A
    function that is not one jitted program, or fails to compile, is left to its first call, which
    says what went wrong."""
    from concurrent.futures import ThreadPoolExecutor

    def compile_one(fn):
        try:
            fn.lower(*args).compile()
        except Exception:  # noqa: BLE001 - the first call raises it again, attributed to its implementation
            return False
        return True

    jitted = {name: fn for name, fn in fns.items() if callable(getattr(fn, "lower", None))}
    if not jitted:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(len(jitted), os.cpu_count() or 1), thread_name_prefix="tpucourse-compile")
    futures = {name: pool.submit(compile_one, fn) for name, fn in jitted.items()}
    pool.shutdown(wait=False)
    return futures


def compiled(futures: dict, *names: str) -> None:
    """Wait for the compiles `compile_ahead` started for these names (all where none is named)."""
    for name in names or tuple(futures):
        if name in futures:
            futures[name].result()


def chip_peak(chip: chips.Chip, dtype: str) -> float | None:
    """One device's peak FLOP/s for matmuls in dtype, None where the chip publishes none."""
    try:
        return chip.per_device().peak_for(dtype)
    except ValueError:
        return None


def mxu_fields(flops: float, seconds: float, peak: float | None, executed: float | None = None) -> dict | None:
    """A time's MXU utilisation as a row keeps it: the op's model FLOPs per (time x the chip's peak
    FLOP/s); None for an op without FLOPs or a dtype without a published peak."""
    if not flops or not seconds:
        return None
    return {"model_flops": float(flops), "executed_flops": None if executed is None else float(executed),
            "utilisation": None if not peak else float(flops / (seconds * peak))}


def timed_fields(timing, known: dict | None = None) -> dict:
    """How a Timing was taken, as its row says it (records.TIMING_METHODS): its method, the host's
    wall time per call, whether the host was the bottleneck, N and what set it, and the per-op
    device time of its samples (device_ops.py; `known`: the kinds of the compiled program's instructions).

    A harness that does not say timed wall-calls, the only method there was before, and sized N
    by the host's clock. The dispatch_bound of a device-trace time is the judge's rule applied
    to the Timing's own wall time per call and median, so the row always survives re-judging.
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
    return dict(timed_by=method, wall_per_call=wall, dispatch_bound=bound,
                calls_per_sample=int(timing.calls_per_sample), sized_by=getattr(timing, "sized_by", SIZED_BY_HOST),
                ops=device_ops.as_row(getattr(timing, "ops", ()), known))


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
    catches zeros, garbage and another input's answer, not a last-bit difference. The error
    is computed where the outputs are (`device_relative_error`): a gate compares tens of
    outputs of millions of entries, which on the host cost seconds each in transfers and
    float64 copies.
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
            what = f"{name} output {j} on input set {i}"
            g_dtype, w_dtype = np.dtype(getattr(g, "dtype", np.asarray(g).dtype)), np.dtype(
                getattr(w, "dtype", np.asarray(w).dtype))
            if np.shape(g) != np.shape(w) or g_dtype != w_dtype:
                return f"{what} is {g_dtype}{list(np.shape(g))}, expected {w_dtype}{list(np.shape(w))}"
            if not np.issubdtype(w_dtype, np.floating) and w_dtype.name != "bfloat16":
                if not np.array_equal(np.asarray(g), np.asarray(w)):
                    return f"{what} differs from its reference"
                continue
            bound = 2 * tolerance.CEILING.get(w_dtype.name, 1e-2)
            error = device_relative_error(g, w)
            if not error <= bound:
                return (f"{what} is wrong at the timed size: relative error {error:.3g} against its reference "
                        f"(bound {bound:.0e})")
    return None


def device_relative_error(got, reference) -> float:
    """tolerance.relative_error (||got - ref|| / ||ref|| over the entries where the reference is
    finite) computed by one jitted program where the arrays are, in float32 after scaling both by
    the reference's largest finite magnitude (no square overflows); two scalars come back. Its
    rounding (about 1e-6 relative) is far below the bounds it is held to (1e-2 and up). Arrays one
    program cannot take together (committed to different devices) are compared on the host."""
    import jax

    from ..core import tolerance

    try:
        with jax.default_matmul_precision(None):
            diff, norm = (float(x) for x in _relative_error_program()(got, reference))
    except (ValueError, TypeError, RuntimeError):  # noqa: PERF203 - placement JAX will not mix: the host's copy
        return tolerance.relative_error(got, reference)
    return diff / (norm if norm > 0 else 1.0)


@functools.cache
def _relative_error_program():
    """device_relative_error's jitted program: (||diff|| / scale, ||ref|| / scale)."""
    import jax
    import jax.numpy as jnp

    def program(g, w):
        g, w = g.astype(jnp.float32), w.astype(jnp.float32)
        finite = jnp.isfinite(w)
        w = jnp.where(finite, w, 0.0)
        scale = jnp.max(jnp.abs(w), initial=0.0)
        scale = jnp.where(scale > 0, scale, 1.0)
        diff = jnp.where(finite, g - w, 0.0) / scale
        w = w / scale
        return jnp.sqrt(jnp.sum(diff * diff)), jnp.sqrt(jnp.sum(w * w))
    return jax.jit(program)
