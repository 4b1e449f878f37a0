"""Graded tests for ch06.reduction: sum_leading_axis(x, *, bl, bm, bn) -> float32.

Unequal blocks everywhere (bl != bm != bn), a ragged last block along the reduced axis
(its padding must not be added), ragged output edges, and an L smaller than one block.
The reduction axis must be "arbitrary": under TPU interpret mode a "parallel" one runs
in a shuffled order, and on two simulated cores both write one output block.
"""

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# (L, M, N, blocks, dtype): each distinct case compiles once
CASES = (
    (20, 64, 256, dict(bl=8, bm=32, bn=128), "float32"),  # 20 = 2 * 8 + 4: a ragged last L block
    (16, 40, 200, dict(bl=8, bm=16, bn=128), "bfloat16"),  # ragged output edges: 40 = 2 * 16 + 8, 200 = 128 + 72
    (3, 8, 128, dict(bl=8, bm=128, bn=128), "float32"),  # everything smaller than one block
)


def _check(impl, case, seed):
    length, m, n, blocks, dtype = case
    x = tst.random_array((length, m, n), dtype, seed, offset=1.0)
    checks.assert_matches_reference(
        impl.reduction.sum_leading_axis, (x,), kwargs=blocks, reference=references.SUM_LEADING_AXIS)


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[1], seed=0)
@example(case=CASES[2], seed=0)  # CASES[0] at seed 0: the race test
def test_sum_leading_axis_matches_reference(impl, case, seed):
    _check(impl, case, seed)


def test_sum_leading_axis_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the parallel axes: the reduced axis must not be one.
    The same call's values are checked too (a ragged last L block)."""
    with tpu.checking_races(impl.reduction.sum_leading_axis):
        _check(impl, CASES[0], 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_leading_axis_lowers_for_tpu(impl, dtype):
    x = tst.random_array((20, 256, 256), dtype, 0)  # ragged L: the mask lowers too
    tpu.assert_lowers_for_tpu(impl.reduction.sum_leading_axis, x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_leading_axis_compiles_for_v5e(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) at the lowering test's call."""
    x = tst.random_array((20, 256, 256), dtype, 0)
    tpu.assert_compiles_for(impl.reduction.sum_leading_axis, x, chip="v5e")
