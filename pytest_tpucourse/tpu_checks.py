"""Checks a CPU can run that a TPU would otherwise be the first to fail.

- The TPU lowering (`lowering_platforms=("tpu",)`) runs Pallas' Mosaic lowering
  on the CPU: it rejects block shapes that break the (8,128) rule (a block's last
  two dimensions divisible by 8 and 128, or equal to the array's, whatever the
  dtype) and primitives Mosaic cannot lower, naming the BlockSpec or the op.
  Neither interpreter checks either.
- Race detection: TPU interpret mode with `detect_races=True` on two simulated
  TensorCores, so the steps of a "parallel" grid axis really run on different
  cores; two cores writing one block (a reduction axis marked "parallel") or
  an unsynchronised DMA is reported. The check runs once per interpreter seed
  (each seed shuffles the parallel axes in another order) and also fails a
  function whose results differ between two orders.
"""

from __future__ import annotations

import contextlib
import io
import re

from .outcomes import WrongResult

_DROP = re.compile(r"^(See details at|Please file an issue|For simplicity, JAX has removed)")
MAX_LINES = 6


def assert_lowers_for_tpu(fn, *args, **kwargs) -> None:
    """Fail if the TPU (Mosaic) lowering rejects fn(*args, **kwargs)."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    fn.jaxpr(*args, **kwargs)  # a stub or a tracing error is reported as such, first
    function = fn.resolve()
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    # Interpret mode would replace the Mosaic lowering: switch it off for the trace.
    with pltpu.force_tpu_interpret_mode(None), _lowering_target(LOWERING_CHIP):
        try:
            jax.jit(lambda *a: function(*a, **kwargs)).trace(*shapes).lower(
                lowering_platforms=("tpu",))
        except Exception as error:
            raise WrongResult(
                f"{fn.display} would not compile for a TPU: the Mosaic lowering rejects it.\n"
                + _summarise(error)) from None


# Some lowering rules depend on the chip generation (integer `//` and `sign`, for one)
# and ask the local device, which on a CPU is no TPU: they lower for this chip instead.
LOWERING_CHIP = "v5e"


@contextlib.contextmanager
def _lowering_target(chip_version: str):
    import jax
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as pltpu

    kind = jax.devices()[0].device_kind
    if kind in tpu_info.registry or tpu_info.chip_version_from_device_kind(kind) is not None:
        yield  # a real TPU, or a device JAX already knows
        return
    tpu_info.registry[kind] = lambda: pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(chip_version), 1)
    try:
        yield
    finally:
        tpu_info.registry.pop(kind, None)


# Interpreter seeds the race check runs under: each shuffles the parallel grid axes
# in another order, and one order can hide a bug another shows.
RACE_SEEDS = (0, 1)


def assert_no_races(fn, *args, cores: int = 2, seeds=RACE_SEEDS, **kwargs) -> None:
    """Run fn under TPU interpret mode with race detection on `cores` simulated cores, once per seed.

    Every pallas_call fn issues runs under the detector: a gradient's forward and
    backward kernels alike. The detector prints a report per kernel (its `races`
    state only keeps the last kernel's), so the printed output is what is read.

    A correct kernel returns the same bits whatever order its parallel steps run in,
    so results that differ between two seeds fail too (a state-carrying axis marked
    "parallel" whose steps happened to stay on one core).

    The interpreter deals the parallel subgrid to the cores in contiguous chunks, so
    a wrongly parallel axis races only where a chunk boundary cuts the run of steps
    that share an output block: with two cores, where the parallel extents before
    that axis multiply to an odd number. Graded tests pick such shapes (one batch, an
    odd number of q blocks or heads) and say so.
    """
    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    results = []
    for seed in seeds:
        params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=cores,
                                       random_seed=seed)
        printed = io.StringIO()
        with pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed):
            out = jax.block_until_ready(fn(*args, **kwargs))
        if "RACE DETECTED" in printed.getvalue():
            report = [line for line in printed.getvalue().splitlines() if line.strip()][:MAX_LINES]
            raise WrongResult(
                f"{fn.display} has a data race under TPU interpret mode with {cores} TensorCores "
                f"(detect_races=True, random_seed={seed}): two cores touch one buffer without "
                f"ordering. A reduction grid axis marked \"parallel\" does this.\n  "
                + "\n  ".join(report))
        results.append((seed, [np.asarray(leaf) for leaf in jax.tree.leaves(out)]))
    (first_seed, first), rest = results[0], results[1:]
    for seed, leaves in rest:
        for position, (a, b) in enumerate(zip(first, leaves)):
            differ = _differ(a, b)
            if differ.any():
                where = f"output[{position}]" if len(first) > 1 else "its output"
                raise WrongResult(
                    f"{fn.display} gives different results when its parallel grid steps run in "
                    f"another order (TPU interpret mode, random_seed {first_seed} and {seed}): "
                    f"{where} differs in {int(differ.sum())} of {differ.size} elements. The steps "
                    f"of a \"parallel\" axis must not depend on each other: an axis that carries "
                    f"state (an accumulator reset at its first step, written at its last) must be "
                    f"\"arbitrary\".")


def assert_no_races_in_backward(fn, args, *, kwargs=None, cores: int = 2, seeds=RACE_SEEDS,
                                seed: int = 0) -> None:
    """assert_no_races on the kernels of fn's backward alone, for seeded random cotangents.

    The forward runs first, under the session's interpret mode; only the pullback (the
    VJP's backward rule and every kernel it issues) runs under the detector. For a backward
    whose summed axes can race where its forward has nothing to race, such as dk and dv
    summed over the query heads of a GQA group, while the forward's own race check runs
    elsewhere.
    """
    import functools

    import jax

    from . import backend
    from .strategies import random_array

    kwargs = kwargs or {}
    fn.jaxpr(*args, **kwargs)  # a stub (TODO) or a tracing error is reported as such, first
    outputs = jax.eval_shape(functools.partial(fn.resolve(), **kwargs), *args)
    cotangents = jax.tree.map(lambda x: random_array(x.shape, x.dtype, seed), outputs)

    def pullback_of(function):
        # jax.vjp's pullback is a pytree (its leaves are the residuals), so one compiled
        # program can run the forward and hand the pullback back.
        try:
            return jax.jit(lambda *a: jax.vjp(lambda *x: function(*x, **kwargs), *a)[1])(*args)
        except Exception as error:  # the learner's forward, run again for its residuals
            backend.reset_after_failure()
            raise fn._outcome(error) from None

    backward = fn.derived(pullback_of, f"the backward of {fn.display}")
    backward.resolve()  # computes the residuals now, outside the detector
    assert_no_races(backward, cotangents, cores=cores, seeds=seeds)


def _differ(a, b):
    """Where two results differ, bit for bit (NaN equals NaN)."""
    import jax.numpy as jnp
    import numpy as np

    if a.shape != b.shape:
        return np.ones(a.shape or (1,), bool)
    if jnp.issubdtype(a.dtype, jnp.inexact):
        a, b = a.astype(np.float64), b.astype(np.float64)
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return a != b


def _summarise(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip() and not _DROP.match(line)]
    text = lines[:MAX_LINES] + (["  ..."] if len(lines) > MAX_LINES else [])
    return "\n".join(f"  {type(error).__name__}: {line}" if i == 0 else f"  {line}"
                     for i, line in enumerate(text))
