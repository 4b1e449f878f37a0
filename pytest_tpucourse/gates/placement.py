"""Where a gate's multi-device work runs when the run has fewer chips than it needs.

Gate 04's collective matmul needs 4 chips. On a machine with one, what can still be checked is
checked, and said for what it is:
  - the correctness checks of the collectives run on simulated CPU devices under TPU interpret mode
    (the JAX process has them beside the chip: the course asks for --cpu-devices at the start), so
    the criterion is *off-chip verified*, never measured;
  - the speed criterion times the collective matmul's compute alone on the one chip (measured), and
    records the distributed kernel as not runnable here, needing 4 chips: never a pass.
`placement` decides, from what the run has; `devices` puts a check where it was placed. The words a
not-runnable row uses for the missing chips are `too_few_chips`, which `chips_short` reads back for
the gate table (gates/report.py).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

ON_CHIP = "chip"  # the accelerator's own devices: enough of them
ON_CPU_DEVICES = "cpu-devices"  # too few chips: simulated CPU devices under TPU interpret mode
RUN_DEVICES = "run-devices"  # off an accelerator: the run's own simulated devices, as every check there
NOWHERE = "nowhere"  # too few chips and too few CPU devices to simulate them

TOO_FEW_CHIPS = "too-few-chips"  # the statistic of a not-runnable row written because chips were missing
_TOO_FEW = re.compile(r"needs (\d+) chips; this run has (\d+) ")


def too_few_chips(needed: int, have: int, device_kind: str) -> str:
    """The words a row uses for chips a run is missing (read back by chips_short)."""
    return f"needs {needed} chips; this run has {have} {device_kind}"


def chips_short(notes: str) -> tuple[int, int] | None:
    """(chips needed, chips the run had) from a row's notes written with too_few_chips, or None."""
    found = _TOO_FEW.search(notes)
    return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass(frozen=True)
class Placement:
    where: str  # ON_CHIP, ON_CPU_DEVICES, RUN_DEVICES or NOWHERE
    count: int  # devices the work needs
    why: str = ""  # for ON_CPU_DEVICES and NOWHERE: what the rows say

    @property
    def off_chip(self) -> bool:
        """The work runs on no chip: a correctness result is off-chip verified at best."""
        return self.where in (ON_CPU_DEVICES, RUN_DEVICES)


def placement(*, on_accelerator: bool, chips: int, device_kind: str, cpu_devices: int, count: int) -> Placement:
    """Where work needing `count` devices runs in a run with `chips` accelerator devices and `cpu_devices`
    CPU devices (on_accelerator: the run is on a chip, or rehearsing as if it were)."""
    if not on_accelerator:
        return Placement(RUN_DEVICES, count)
    if chips >= count:
        return Placement(ON_CHIP, count)
    short = too_few_chips(count, chips, device_kind)
    if cpu_devices >= count:
        return Placement(ON_CPU_DEVICES, count, f"{short}: checked on {count} CPU devices under TPU interpret mode")
    return Placement(NOWHERE, count, f"{short}, and {cpu_devices} CPU device{'s' if cpu_devices != 1 else ''} "
                                     f"to simulate them on")


def cpu_device_count() -> int:
    import jax

    return len(jax.devices("cpu"))


@contextlib.contextmanager
def devices(where: Placement):
    """The devices to build the work's mesh from, in force for the block: on CPU devices with TPU interpret
    mode on and a CPU device the default, so every array the check makes lives with its mesh."""
    import jax

    if where.where == NOWHERE:
        raise ValueError(f"nowhere to run: {where.why}")
    if where.where != ON_CPU_DEVICES:
        yield jax.devices()[:where.count]
        return
    from jax.experimental.pallas import tpu as pltpu

    from ..grading import backend

    cpus = jax.devices("cpu")[:where.count]
    with pltpu.force_tpu_interpret_mode(backend.tpu_interpret_params()), jax.default_device(cpus[0]):
        yield cpus
