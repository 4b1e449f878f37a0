"""The TPU on a CPU, as graded tests use it: the real compiler (libtpu, ahead of time), the
Mosaic lowering, and the rules a TPU would be the first to enforce (races, bounds, DMA modes).

A face over `compiler/`, `readers/` and `checking/`: graded tests import this module, never
those packages, so the machinery can move without a chapter changing. Where a graded test
names a chip ("v6e"), the face turns the name into the run's Chip (grading/context.py) before
the machinery, which takes Chips only, sees it.
"""

from __future__ import annotations

from . import chips

from .checking.compiler_figures import (assert_blocks_compile, assert_efficiency_matches_vmatmuls,
                                        assert_footprint_matches_compiler, vmatmuls)
from .checking.tpu_rules import (DMA_SETTINGS, RACE_BETWEEN_DEVICES, assert_compiles_for,
                                 assert_correct_in_each_dma_mode, assert_lowers_for_tpu, assert_no_races,
                                 assert_no_races_in_backward, assert_out_of_bounds_raises,
                                 assert_prefetches, checking_races, interpret_setting)
from .chips import SCOPED_VMEM_LIMITS
from .compiler import libtpu
from .compiler.libtpu import (NEWEST_MEASURED, TpuCompileError, available, libtpu_release, measured,
                             skip_unless_available, unmeasured_line)
from .grading import context
from .readers import mosaic
from .readers.compiled_collectives import assert_ring_collectives, compiled_collectives

__all__ = [
    "DMA_SETTINGS", "NEWEST_MEASURED", "RACE_BETWEEN_DEVICES", "SCOPED_VMEM_LIMITS", "TpuCompileError",
    "assert_blocks_compile", "assert_compiles_for", "assert_correct_in_each_dma_mode",
    "assert_efficiency_matches_vmatmuls", "assert_footprint_matches_compiler", "assert_lowers_for_tpu",
    "assert_no_races", "assert_no_races_in_backward", "assert_out_of_bounds_raises", "assert_prefetches",
    "assert_ring_collectives", "available", "checking_races", "compile_for", "compiled_collectives",
    "interpret_setting", "kernels", "libtpu_release", "measured", "unmeasured_line", "lower_for_tpu", "skip_unless_available", "vmatmuls",
]


def compile_for(fn, *args, chip: chips.Chip | str | None = None, **kwargs) -> libtpu.CompiledForTpu:
    """fn(*args, **kwargs) compiled ahead of time by the real TPU compiler (compiler/libtpu.py) for
    `chip`: a Chip, a name the run knows, or None (the chip the run's kernel checks target)."""
    return libtpu.compile_for(fn, *args, chip=context.resolve_chip(chip), **kwargs)


def lower_for_tpu(fn, *args, chip: chips.Chip | str | None = None, **kwargs):
    """fn(*args, **kwargs) lowered for a TPU on any machine (readers/mosaic.py), with the lowering
    rules of `chip`: a Chip, a name the run knows, or None (the run's kernel chip)."""
    return mosaic.lower_for_tpu(fn, *args, chip=context.resolve_chip(chip), **kwargs)


def kernels(fn, *args, chip: chips.Chip | str | None = None, **kwargs) -> list[mosaic.MosaicKernel]:
    """Every pallas_call of fn(*args, **kwargs), lowered for `chip` (as lower_for_tpu), as Mosaic text."""
    return mosaic.kernels(fn, *args, chip=context.resolve_chip(chip), **kwargs)
