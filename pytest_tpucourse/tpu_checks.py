"""Checks a CPU can run that a TPU would otherwise be the first to fail.

- The TPU lowering (`lowering_platforms=("tpu",)`) runs Pallas' Mosaic lowering
  on the CPU: it rejects block shapes that break the (8,128)/(16,128) rule and
  primitives Mosaic cannot lower, naming the BlockSpec or the op. Neither
  interpreter checks either.
- Race detection: TPU interpret mode with `detect_races=True` on two simulated
  TensorCores, so the steps of a "parallel" grid axis really run on different
  cores; two cores writing one block (a reduction axis marked "parallel") or
  an unsynchronised DMA is reported.
- Every DMA execution mode: a kernel that issues DMAs is checked once per mode of
  TPU interpret mode (`dma_execution_mode`), since each mode hides some DMA bugs
  the other shows, and a semaphore left non-zero when a kernel ends (a copy or a
  signal nobody waited for) fails the check.
"""

from __future__ import annotations

import contextlib
import io
import re

from . import interpret_internals
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


RACE_BETWEEN_CORES = ("two cores touch one buffer without ordering. A reduction grid axis marked "
                      "\"parallel\" does this.")
RACE_BETWEEN_DEVICES = ("a device or a DMA touches a buffer that another is still using, with no "
                        "semaphore wait ordering them: a semaphore shared by two copies, or a buffer "
                        "reused before the copy out of it or into it was waited for.")


def assert_no_races(fn, *args, cores: int = 2, why: str = RACE_BETWEEN_CORES, **kwargs) -> None:
    """Run fn under TPU interpret mode with race detection on `cores` simulated cores.

    why: what such a race usually is, for the report (RACE_BETWEEN_DEVICES for
    kernels that copy between devices, run with cores=1).
    """
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpreter

    params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=cores, random_seed=0)
    printed = io.StringIO()
    with pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed):
        jax.block_until_ready(fn(*args, **kwargs))
    races = tpu_interpreter.races
    if (races is not None and races.races_found) or "RACE DETECTED" in printed.getvalue():
        report = [line for line in printed.getvalue().splitlines() if line.strip()][:MAX_LINES]
        raise WrongResult(
            f"{fn.display} has a data race under TPU interpret mode with {cores} TensorCore"
            f"{'s' if cores != 1 else ''} per device (detect_races=True): {why}\n  "
            + "\n  ".join(report))


def _summarise(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip() and not _DROP.match(line)]
    text = lines[:MAX_LINES] + (["  ..."] if len(lines) > MAX_LINES else [])
    return "\n".join(f"  {type(error).__name__}: {line}" if i == 0 else f"  {line}"
                     for i, line in enumerate(text))


# The two DMA execution modes of TPU interpret mode. Each hides bugs the other shows: a
# semaphore shared by two copies lets an on_wait wait return before its own copy landed,
# while eager copies hide it; a receive buffer reused before it was read is overwritten by
# an eager copy, while on_wait copies land too late to hide anything (README of chapter 14).
DMA_EXECUTION_MODES = {
    "on_wait": "which runs a copy only when something waits on its semaphore",
    "eager": "which runs a copy the moment it starts",
}


def assert_correct_in_each_dma_mode(fn, check) -> None:
    """Run `check()`, the value checks of fn, once per DMA execution mode of TPU interpret mode.

    No one mode shows every DMA bug (DMA_EXECUTION_MODES says which hides what), so a
    kernel that issues DMAs is checked in all of them, and a semaphore that a kernel
    leaves non-zero at its end fails the check too. The session's other interpret
    settings are kept; off a TPU the generic interpreter (--interpret fast), which
    cannot run remote DMAs, is replaced by TPU interpret mode. Natively on a TPU the
    check runs once.
    """
    import dataclasses

    from jax.experimental.pallas import tpu as pltpu

    setting = interpret_internals.interpret_setting()
    if setting is None:
        check()
        return
    base = setting if isinstance(setting, pltpu.InterpretParams) else pltpu.InterpretParams(random_seed=0)
    for mode, runs in DMA_EXECUTION_MODES.items():
        printed = io.StringIO()
        try:
            with pltpu.force_tpu_interpret_mode(dataclasses.replace(base, dma_execution_mode=mode)), \
                    contextlib.redirect_stdout(printed):
                check()
        except WrongResult as failure:  # a wrong value: say which mode showed it
            raise WrongResult(f"{failure.message}\n  (under TPU interpret mode with "
                              f"dma_execution_mode={mode!r}, {runs})") from None
        left = interpret_internals.semaphores_left_nonzero(printed.getvalue())
        if left:
            raise WrongResult(
                f"{fn.display} ends its kernel with semaphores that are not back at zero (TPU interpret "
                f"mode, dma_execution_mode={mode!r}): {left}. Every signal needs its wait and every "
                f"copy its .wait(); a TPU reports this as an error when the kernel ends.")
