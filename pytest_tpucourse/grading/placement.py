"""Where each part of a graded test runs when the run's kernels run natively on a TPU.

Natively (compiled by Mosaic) a kernel's values are the chip's own. What only TPU interpret mode
can show cannot be shown there: races between two simulated TensorCores, copies run eagerly or
on their wait, an out-of-bounds block index (the chip may clamp it), the grid order it ran in.
And JAX's TPU interpreter cannot run those checks in a process that holds a TPU: with
`num_cores_or_threads=2` every output is NaN, on the TPU device and on the host's CPU device
alike (measured on a v5e, JAX 0.10.2; docs/tpu.md), while a process started with
JAX_PLATFORMS=cpu gets them right. So on a TPU host:

  - a test marked `host_interpret(what)` runs twice: here, natively, where its interpret-only
    checks step aside (`interpret_part_here` says False) and its values are the chip's; and on
    the host's CPU, in a process of its own under TPU interpret mode, where it runs whole. It
    passes only if both do (run/host_cpu.py merges the two).
  - a test marked `devices(n)` on a host with fewer than n chips runs whole on n CPU devices of
    the host, under TPU interpret mode, in a process of its own: a one-chip host never skips a
    multi-device chapter. With n chips or more it runs here, on the chips.
  - everything else runs here.

Off a TPU (a CPU, or --interpret tpu/fast, which run on the host's CPU) everything runs here, as
it always did. `decide` is a pure function of the markers and the host, so a machine without a
chip holds the rules (tests/test_placement.py).
"""

from __future__ import annotations

from dataclasses import dataclass

HERE = "here"
HOST_CPU = "host-cpu"  # the whole test, in the host-CPU process
BOTH = "both"  # values here, natively; the whole test again in the host-CPU process


@dataclass(frozen=True)
class Host:
    """What decides placement: the platform kernels run on, and how many of its devices there are."""

    platform: str  # jax.default_backend(): cpu, gpu, tpu
    kernels_native: bool  # kernels compiled by Mosaic (not interpret mode)
    device_count: int

    @property
    def native_tpu(self) -> bool:
        return self.platform == "tpu" and self.kernels_native


@dataclass(frozen=True)
class Placement:
    where: str  # HERE, HOST_CPU or BOTH
    why: str = ""  # what a report line says of it (empty for HERE)
    cpu_devices: int = 0  # the CPU devices the host-CPU process needs (HOST_CPU)


def decide(*, interpret_part: str | None, devices_needed: int | None, host: Host) -> Placement:
    """Where a test runs, from its markers (host_interpret's text, devices' count) and the host."""
    if not host.native_tpu:
        return Placement(HERE)
    if devices_needed is not None and devices_needed > host.device_count:
        return Placement(HOST_CPU, f"on {devices_needed} CPU devices of this host (TPU interpret mode): "
                                   f"it needs {devices_needed} devices, this host has {host.device_count} "
                                   f"TPU chip{'s' if host.device_count != 1 else ''}",
                         cpu_devices=devices_needed)
    if interpret_part is not None:
        return Placement(BOTH, f"values natively; {interpret_part} under TPU interpret mode on this host's CPU")
    return Placement(HERE)


class NotPlaced(RuntimeError):
    """An interpret-only check called natively from a test not marked to run it on the host's CPU."""


def interpret_part_here(what: str) -> bool:
    """Whether a check that only TPU interpret mode can make (`what`) runs in this process.

    True off a native TPU. On a native TPU, False inside a test placed BOTH (its host-CPU half
    makes the check); a NotPlaced error inside any other test, naming the marker it needs.
    """
    from ..core.running_test import current_test
    from . import context

    active = context.active()
    if not active.native_tpu:
        return True
    running = current_test()
    if running is not None and running in active.interpret_elsewhere:
        return False
    raise NotPlaced(
        f"{what} runs only under TPU interpret mode, and this run's kernels run natively on a TPU: mark "
        f"the test @pytest.mark.host_interpret({what!r}) so that part runs on the host's CPU "
        f"(grading/placement.py)")
