"""Graded tests for ch10.roofline: floor_seconds(flops, nbytes, peak_flops, hbm_bandwidth)."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, chips

V5E = (1.97e14, 8.2e11)  # jax's v5e figures: bf16 FLOP/s, HBM B/s

# The course's v5e table, counted by hand: (name, FLOPs, bytes, floor in us rounded to 0.1).
TABLE = (
    ("matmul 4096x4096x4096 bf16", 2 * 4096**3, 3 * 4096 * 4096 * 2, 697.7),
    ("matmul 8x4096x4096 bf16", 2 * 8 * 4096 * 4096, (8 * 4096 + 4096 * 4096 + 8 * 4096) * 2, 41.1),
    ("add 4096x4096 bf16", 4096 * 4096, 3 * 4096 * 4096 * 2, 122.8),
)


def reference(flops, nbytes, peak, bandwidth):
    return max(flops / peak, nbytes / bandwidth)


@pytest.mark.parametrize("name, flops, nbytes, table_us", TABLE, ids=[t[0] for t in TABLE])
def test_the_course_v5e_table(impl, name, flops, nbytes, table_us):
    out = impl.roofline.floor_seconds(flops, nbytes, *V5E)
    assert round(reference(flops, nbytes, *V5E) * 1e6, 1) == table_us
    checks.assert_close(np.float64(out), reference(flops, nbytes, *V5E), fn=impl.roofline.floor_seconds,
                        dtype="float64", what=f"the v5e floor of {name}",
                        note=f"the course's table gives {table_us} us")


@pytest.mark.parametrize("chip", chips.TPU_CHIPS + chips.GPU_CHIPS)  # every chip of the registry, in every profile
@given(intensity=st.floats(min_value=0.01, max_value=1e4), nbytes=st.integers(1, 10**12))
@example(intensity=0.01, nbytes=1)  # deep in the memory-bound region
@example(intensity=1e4, nbytes=10**12)  # deep in the compute-bound region
def test_any_chip_any_intensity(impl, chip, intensity, nbytes):
    c = chips.get_chip(chip)
    flops = intensity * nbytes
    out = impl.roofline.floor_seconds(flops, nbytes, c.peak_flops, c.hbm_bandwidth)
    checks.assert_close(np.float64(out), reference(flops, nbytes, c.peak_flops, c.hbm_bandwidth),
                        fn=impl.roofline.floor_seconds, dtype="float64", what=f"the {chip} floor")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): chips and intensities the grader draws."""
    cases = []
    for _ in range(4):
        c = chips.get_chip(str(rng.choice(chips.TPU_CHIPS + chips.GPU_CHIPS)))
        nbytes = int(rng.integers(1, 10**12))
        flops = float(10 ** rng.uniform(-2, 4)) * nbytes
        cases.append(checks.trusted.exact("floor_seconds", (flops, nbytes, c.peak_flops, c.hbm_bandwidth),
                                          expected=reference(flops, nbytes, c.peak_flops, c.hbm_bandwidth),
                                          compare=checks.trusted.close(rtol=1e-9)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
