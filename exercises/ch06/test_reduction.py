"""Graded tests for ch06.reduction: sum_leading_axis(x, *, bl, bm, bn) -> float32.

Unequal blocks everywhere (bl != bm != bn), a ragged last block along the reduced axis
(its padding must not be added; once with L a multiple of 8 but not of bl), ragged output
edges, and an L smaller than one block.
The reduction axis must be "arbitrary": under TPU interpret mode a "parallel" one runs
in a shuffled order, and on two simulated cores both write one output block.
"""

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

# (L, M, N, blocks, dtype): each distinct case compiles once
CASES = (
    (20, 64, 256, dict(bl=8, bm=32, bn=128), "float32"),  # 20 = 2 * 8 + 4: a ragged last L block
    (16, 40, 200, dict(bl=8, bm=16, bn=128), "bfloat16"),  # ragged output edges: 40 = 2 * 16 + 8, 200 = 128 + 72
    (3, 8, 128, dict(bl=8, bm=128, bn=128), "float32"),  # everything smaller than one block
    # 24 = 16 + 8: a multiple of 8 but not of bl, so a mask keyed to 8 rows misses the padding;
    # grid (1, 3, 2): an odd number of parallel steps, so two cores that split a "parallel" L
    # axis both write one output block (the race test's case)
    (24, 32, 384, dict(bl=16, bm=32, bn=128), "float32"),
)
RACE_CASE = CASES[3]


def _check(impl, case, seed):
    length, m, n, blocks, dtype = case
    x = tst.random_array((length, m, n), dtype, seed, offset=1.0)
    checks.assert_matches_reference(
        impl.reduction.sum_leading_axis, (x,), kwargs=blocks, reference=references.SUM_LEADING_AXIS)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_leading_axis_lowers_for_tpu(impl, dtype):
    x = tst.random_array((20, 256, 256), dtype, 0)  # ragged L: the mask lowers too
    tpu.assert_lowers_for_tpu(impl.reduction.sum_leading_axis, x, compile_ahead=True)


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[1], seed=0)
@example(case=CASES[2], seed=0)
@example(case=CASES[0], seed=0)
@example(case=CASES[3], seed=1)  # CASES[3] at seed 0: the race test
def test_sum_leading_axis_matches_reference(impl, case, seed):
    _check(impl, case, seed)


def test_sum_leading_axis_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the parallel axes: the reduced axis must not be one.
    The interpreter deals the parallel steps to the cores in two contiguous runs; with an odd
    number of them (3 output blocks) the cut falls inside one block's L steps, where a
    "parallel" L axis races. The same call's values are checked too (a ragged last L block)."""
    with tpu.checking_races(impl.reduction.sum_leading_axis):
        _check(impl, RACE_CASE, 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_leading_axis_compiles_for_v5e(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) at the lowering test's call."""
    x = tst.random_array((20, 256, 256), dtype, 0)
    tpu.assert_compiles_for(impl.reduction.sum_leading_axis, x, chip="v5e")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): two cases the grader draws, on values
    the tree has never seen."""
    cases = []
    for index in rng.choice(len(CASES), size=2, replace=False):
        length, m, n, blocks, dtype = CASES[int(index)]
        x = tst.random_array((length, m, n), dtype, checks.trusted.seed(rng), offset=1.0)
        cases.append(checks.trusted.values("sum_leading_axis", (x,), kwargs=blocks,
                                           reference=references.SUM_LEADING_AXIS))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
