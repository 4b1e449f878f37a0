"""What every gate test of a run shares (`GateContext`): the chip, the device, thresholds, where rows go."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import chips
from ..grading.backend import DeviceFacts
from . import judge


@dataclass(frozen=True)
class GateContext:
    """What every gate test of a run shares: the chip, the device read at the start, the thresholds
    captured at the start, where rows go."""

    registry: chips.ChipRegistry
    chip: chips.Chip | None  # None: an accelerator we have no figures for, gates not asked for
    device: DeviceFacts
    records_path: Path
    root: Path
    gates: tuple = field(default_factory=judge.snapshot)
    interpret_requested: bool = False
    kernels_native: bool = False
    rehearsal: object = None  # a rehearsal.Rehearsal for `--rehearse`
    sweeps_path: Path | None = None  # where ceiling sweeps are kept between runs (sweeps.py); None: not kept
    course_sweeps_path: Path | None = None  # the course's own sweeps, read after the run's (sweeps.COURSE_PATH)
    resweep: bool = False  # sweep every ceiling again, whatever is kept
    finish_searches: bool = False  # continue a kept search that spent its budget with a neighbour untried

    @property
    def on_accelerator(self) -> bool:
        return self.device.is_accelerator

    @property
    def platform(self) -> str:
        return self.device.platform

    @property
    def device_kind(self) -> str:
        return self.device.device_kind


def gate_context(registry: chips.ChipRegistry, requested: str | None, device: DeviceFacts,
                 records_path: Path, root: Path, *, strict: bool, interpret_requested: bool = False,
                 kernels_native: bool = False, rehearsal=None, sweeps_path: Path | None = None,
                 course_sweeps_path: Path | None = None, resweep: bool = False,
                 finish_searches: bool = False) -> GateContext:
    """Resolve the run's chip. strict: a chip that cannot be named for this device is an error."""
    try:
        name = chips.chip_for_run(requested, device.platform, device.device_kind, registry)
    except chips.ChipMismatch:
        if strict:
            raise
        name = None
    if name is None and device.platform == "cpu":
        name = chips.DEFAULT_CHIP
    return GateContext(registry=registry, chip=registry.get(name) if name else None, device=device,
                       records_path=records_path, root=root, interpret_requested=interpret_requested,
                       kernels_native=kernels_native, rehearsal=rehearsal, sweeps_path=sweeps_path,
                       course_sweeps_path=course_sweeps_path, resweep=resweep,
                       finish_searches=finish_searches)
