"""Graded tests for ch10.decide: rows_to_compute_bound(k, n, *, itemsize, peak_flops, hbm_bandwidth)."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, chips, roofline

V5E = chips.get_chip("v5e")


# A chip described by its figures rather than named: 2^47 FLOP/s and 2^39 B/s, a ridge of exactly
# 256 FLOP/byte (a v5e's is 240.2), so that the times compared below are exact in floating point too.
DESCRIBED = dict(peak_flops=2.0 ** 47, hbm_bandwidth=2.0 ** 39)


def check(impl, chip, k, n, itemsize, figures=None):
    """The answer for a registry chip, or for `figures` (peak_flops, hbm_bandwidth) named `chip`."""
    if figures is None:
        c = chips.get_chip(chip)
        figures = dict(peak_flops=c.peak_flops, hbm_bandwidth=c.hbm_bandwidth)
    expected = roofline.compute_bound_rows(k, n, itemsize=itemsize, **figures)
    kwargs = dict(itemsize=itemsize, **figures)
    fn = impl.decide.rows_to_compute_bound
    if expected is None:
        checks.assert_rejects(fn, (k, n), kwargs=kwargs, mentions=(str(k), str(n)),
                              note=f"on {chip}: no row count makes it compute-bound")
        return
    out = fn(k, n, **kwargs)
    checks.assert_close(np.int64(out), np.int64(expected), fn=fn, dtype="int64",
                        what=f"the fewest rows for which a (m, {k}) @ ({k}, {n}) matmul, {itemsize}-byte "
                             f"elements, is compute-bound on {chip}",
                        note=f"at m = {expected} its compute time is at least its memory time (a tie counts as "
                             f"compute); at m = {expected - 1} its memory time is the longer" if expected > 1 else "")


def test_the_readmes_decision(impl):
    """bf16 (m, 4096) @ (4096, 4096) on v5e: 273 rows (240.9 FLOP/byte against a ridge of 240.2)."""
    check(impl, "v5e", 4096, 4096, 2)


@pytest.mark.parametrize("k, n", [(256, 256), (128, 8192)])
def test_no_batch_makes_a_thin_matmul_compute_bound(impl, k, n):
    """2kn / (itemsize (k + n)) is at most 128 FLOP/byte here: below v5e's ridge however many rows."""
    check(impl, "v5e", k, n, 2)


@pytest.mark.parametrize("k, n, itemsize", [
    (1024, 1024, 2),  # at 512 rows compute and memory take 2^-17 s each: a tie, which counts as compute
    (2048, 1024, 4),  # a tie at 2048 rows, k and n unequal
    (512, 512, 2),    # a zero slope: every row adds as much memory time as compute time, never more
    (384, 192, 1),    # a zero slope, k and n unequal
], ids=["tie", "tie-unequal", "zero-slope", "zero-slope-unequal"])
def test_a_described_chip_at_a_tie_and_at_a_zero_slope(impl, k, n, itemsize):
    """The decision's two edges, on a chip given by its figures: a row count whose compute time equals
    its memory time is the answer (a tie counts as compute); where each row adds exactly as much
    memory time as compute time, no row count is enough, and the call must refuse."""
    check(impl, "a chip of 2^47 FLOP/s and 2^39 B/s", k, n, itemsize, figures=DESCRIBED)


@pytest.mark.parametrize("chip", chips.TPU_CHIPS + chips.GPU_CHIPS)  # every chip of the registry, in every profile
@given(k=st.sampled_from([128, 384, 1024, 4096, 8192]), n=st.sampled_from([128, 640, 2048, 4096, 16384]),
       itemsize=st.sampled_from([1, 2, 4]))
@example(k=8192, n=8192, itemsize=2)
@example(k=1024, n=16384, itemsize=4)  # f32: twice the bytes, more rows
@example(k=4096, n=4096, itemsize=1)
def test_any_chip_and_shape(impl, chip, k, n, itemsize):
    check(impl, chip, k, n, itemsize)


def _tie(itemsize: int, t: int) -> tuple[int, int]:
    """(k, rows) of a square (m, k) @ (k, k) matmul whose compute and memory times tie at `rows` on
    the DESCRIBED chip: with k = 128 (t + 2 itemsize), rows = 128 itemsize (t + 2 itemsize) / t, a
    whole number wherever t divides 256 itemsize² (a power of two up to it)."""
    k = 128 * (t + 2 * itemsize)
    return k, 128 * itemsize * (t + 2 * itemsize) // t


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): chips and shapes the grader draws that
    some row count makes compute-bound (the refusals are the graded tests'), and a tie the grader
    draws on the described chip."""
    itemsize = int(rng.choice((1, 2, 4)))
    k, rows = _tie(itemsize, 2 ** int(rng.integers(0, 5)))
    cases = [checks.trusted.exact("rows_to_compute_bound", (k, k), kwargs=dict(itemsize=itemsize, **DESCRIBED),
                                  expected=rows, what=f"the fewest compute-bound rows of a (m, {k}) @ ({k}, {k}) "
                                                      f"matmul on a chip of 2^47 FLOP/s and 2^39 B/s (a tie)")]
    while len(cases) < 5:
        c = chips.get_chip(str(rng.choice(chips.TPU_CHIPS + chips.GPU_CHIPS)))
        k, n = int(rng.choice((128, 384, 1024, 4096, 8192))), int(rng.choice((128, 640, 2048, 4096, 16384)))
        kwargs = dict(itemsize=int(rng.choice((1, 2, 4))), peak_flops=c.peak_flops, hbm_bandwidth=c.hbm_bandwidth)
        expected = roofline.compute_bound_rows(k, n, **kwargs)
        if expected is not None:
            cases.append(checks.trusted.exact("rows_to_compute_bound", (k, n), kwargs=kwargs, expected=expected,
                                              what=f"the fewest compute-bound rows of a (m, {k}) @ ({k}, {n}) "
                                                   f"matmul on {c.name}"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
