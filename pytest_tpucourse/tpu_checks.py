"""Checks a CPU can run that a TPU would otherwise be the first to fail.

- The TPU lowering (`lowering_platforms=("tpu",)`) runs Pallas' Mosaic lowering
  on the CPU: it rejects block shapes that break the (8,128)/(16,128) rule and
  primitives Mosaic cannot lower, naming the BlockSpec or the op. Neither
  interpreter checks either.
- Race detection: TPU interpret mode with `detect_races=True` on two simulated
  TensorCores, so the steps of a "parallel" grid axis really run on different
  cores; two cores writing one block (a reduction axis marked "parallel") or
  an unsynchronised DMA is reported.
"""

from __future__ import annotations

import contextlib
import io
import re

from . import jax_internals
from .chips import JAX_CHIP_VERSIONS
from .outcomes import WrongResult

_DROP = re.compile(r"^(See details at|Please file an issue|For simplicity, JAX has removed)")
MAX_LINES = 6


def assert_lowers_for_tpu(fn, *args, **kwargs) -> None:
    """Fail if the TPU (Mosaic) lowering rejects fn(*args, **kwargs).

    Some lowering rules depend on the chip generation (integer `//` and `sign`, for one)
    and ask the local device, which on a CPU is no TPU: they lower for the run's chip
    (`--chip`, v5e by default) instead.
    """
    import jax
    from jax.experimental.pallas import tpu as pltpu

    fn.jaxpr(*args, **kwargs)  # a stub or a tracing error is reported as such, first
    function = fn.resolve()
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    # Interpret mode would replace the Mosaic lowering: switch it off for the trace.
    chip_version = JAX_CHIP_VERSIONS[fn.context.lowering_chip]
    with pltpu.force_tpu_interpret_mode(None), jax_internals.tpu_info_for_this_device(chip_version):
        try:
            jax.jit(lambda *a: function(*a, **kwargs)).trace(*shapes).lower(
                lowering_platforms=("tpu",))
        except Exception as error:
            raise WrongResult(
                f"{fn.display} would not compile for a TPU: the Mosaic lowering rejects it.\n"
                + _summarise(error)) from None


def assert_no_races(fn, *args, cores: int = 2, **kwargs) -> None:
    """Run fn under TPU interpret mode with race detection on `cores` simulated cores."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=cores, random_seed=0)
    printed = io.StringIO()
    with pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed):
        jax.block_until_ready(fn(*args, **kwargs))
    if jax_internals.races_found() or "RACE DETECTED" in printed.getvalue():
        report = [line for line in printed.getvalue().splitlines() if line.strip()][:MAX_LINES]
        raise WrongResult(
            f"{fn.display} has a data race under TPU interpret mode with {cores} TensorCores "
            f"(detect_races=True): two cores touch one buffer without ordering. A reduction "
            f"grid axis marked \"parallel\" does this.\n  " + "\n  ".join(report))


def _summarise(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip() and not _DROP.match(line)]
    text = lines[:MAX_LINES] + (["  ..."] if len(lines) > MAX_LINES else [])
    return "\n".join(f"  {type(error).__name__}: {line}" if i == 0 else f"  {line}"
                     for i, line in enumerate(text))
