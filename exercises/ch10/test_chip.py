"""Graded tests for ch10.chip: chip_figures(version, cores)."""

import numpy as np
import pytest

from pytest_tpucourse import checks, chips

# (jax ChipVersion, TensorCores, our chip name)
CHIPS = (("v2", 2, "v2"), ("v3", 2, "v3"), ("v4", 2, "v4"), ("v5e", 1, "v5e"), ("v5p", 2, "v5p"),
         ("v6e", 1, "v6e"), ("7x", 2, "v7x"))


@pytest.mark.parametrize("version, cores, name", CHIPS, ids=[c[2] for c in CHIPS])
def test_chip_figures(impl, version, cores, name):
    peak, bandwidth = impl.chip.chip_figures(version, cores)
    chip = chips.get_chip(name)
    checks.assert_close(np.float64(peak), chip.peak_flops, fn=impl.chip.chip_figures, dtype="float64",
                        what="peak FLOP/s of the whole chip")
    checks.assert_close(np.float64(bandwidth), chip.hbm_bandwidth, fn=impl.chip.chip_figures, dtype="float64",
                        what="HBM bytes/s of the whole chip")

