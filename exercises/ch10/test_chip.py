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


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): chips the grader picks (a table of
    seven: what is drawn is which)."""
    return [checks.trusted.exact("chip_figures", (version, cores),
                                 expected=(chips.get_chip(name).peak_flops, chips.get_chip(name).hbm_bandwidth),
                                 compare=checks.trusted.close(rtol=1e-12))
            for version, cores, name in (CHIPS[int(i)] for i in rng.choice(len(CHIPS), size=3, replace=False))]


TRUSTED = checks.trusted.Cases(_trusted_cases)
