"""Graded tests for ch06.index_maps: transpose(x, *, bm, bn) and gather_rows(table, idx).

transpose is drawn with unequal blocks (bm != bn), ragged edges on both axes, arrays
smaller than one block and a grid whose two axes have different block counts (3 x 5); gather_rows with repeated indices, a table shorter than the
index list, and an index one past the table's end, which must fail under TPU interpret
mode rather than read some other row.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, tpu
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.references import Reference

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")


def _transpose(x):
    return x.T


def _gather(table, idx):
    return table[idx]


TRANSPOSE = Reference("transpose", _transpose, _transpose)
GATHER = Reference("row gather", _gather, _gather)

# (M, N, blocks, dtype): each distinct case compiles once
TRANSPOSES = (
    (300, 520, dict(bm=128, bn=256), "float32"),  # bm != bn, ragged on both axes: a 3 x 3 grid
    (72, 200, dict(bm=128, bn=256), "bfloat16"),  # smaller than one block on both axes
    (300, 520, dict(bm=128, bn=128), "float32"),  # a 3 x 5 grid: the output's is 5 x 3
)
# (V rows, D, R indices, dtype)
GATHERS = ((37, 256, 12, "float32"), (5, 128, 16, "bfloat16"))  # a table shorter than the list


def _indices(rows, count, seed):
    return jnp.asarray(np.random.default_rng(seed).integers(0, rows, count), jnp.int32)


def _check_transpose(impl, case, seed):
    m, n, blocks, dtype = case
    x = tst.random_array((m, n), dtype, seed)
    checks.assert_matches_reference(impl.index_maps.transpose, (x,), kwargs=blocks,
                                    reference=TRANSPOSE)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transpose_lowers_for_tpu(impl, dtype):
    x = tst.random_array((512, 384), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.index_maps.transpose, x, compile_ahead=True)


@given(case=tst.few(*TRANSPOSES), seed=tst.seeds())
@example(case=TRANSPOSES[1], seed=0)  # TRANSPOSES[0] at seed 0: the race test
@example(case=TRANSPOSES[2], seed=0)  # a grid whose axes have different block counts, in every profile
def test_transpose_matches_reference(impl, case, seed):
    _check_transpose(impl, case, seed)


def test_transpose_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split a ragged 3 x 3 grid; the same call's values are checked too."""
    with tpu.checking_races(impl.index_maps.transpose):
        _check_transpose(impl, TRANSPOSES[0], 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transpose_compiles_for_v5e(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) at the lowering test's call."""
    x = tst.random_array((512, 384), dtype, 0)
    tpu.assert_compiles_for(impl.index_maps.transpose, x, chip="v5e")


def _check_gather(impl, case, seed):
    rows, width, count, dtype = case
    table = tst.random_array((rows, width), dtype, seed)
    idx = _indices(rows, count, seed)
    checks.assert_matches_reference(
        impl.index_maps.gather_rows, (table, idx), reference=GATHER)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gather_rows_lowers_for_tpu(impl, dtype):
    table = tst.random_array((1000, 256), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.index_maps.gather_rows, table, _indices(1000, 64, 0), compile_ahead=True)


@given(case=tst.few(*GATHERS), seed=tst.seeds())
@example(case=GATHERS[1], seed=1)  # GATHERS[0] at seed 0: the race test
def test_gather_rows_matches_reference(impl, case, seed):
    _check_gather(impl, case, seed)


def test_gather_rows_fails_on_an_index_past_the_table(impl):
    rows, width, count, dtype = GATHERS[1]  # the shapes of a value case: its program is reused
    table = tst.random_array((rows, width), dtype, 0)
    idx = _indices(rows, count, 0).at[count // 2].set(rows)  # one index one past the last row
    tpu.assert_out_of_bounds_raises(impl.index_maps.gather_rows, table, idx,
                                           what=f"index {rows} of a {rows}-row table")


def test_gather_rows_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the rows; the same call's values are checked too."""
    with tpu.checking_races(impl.index_maps.gather_rows):
        _check_gather(impl, GATHERS[0], 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gather_rows_compiles_for_v5e(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) at the lowering test's call."""
    table = tst.random_array((1000, 256), dtype, 0)
    tpu.assert_compiles_for(impl.index_maps.gather_rows, table, _indices(1000, 64, 0), chip="v5e")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a transpose and a gather of cases the
    grader draws, on values the tree has never seen."""
    m, n, blocks, dtype = TRANSPOSES[int(rng.integers(len(TRANSPOSES)))]
    rows, width, count, gather_dtype = GATHERS[int(rng.integers(len(GATHERS)))]
    seed = checks.trusted.seed(rng)
    table = tst.random_array((rows, width), gather_dtype, seed)
    idx = jnp.asarray(rng.integers(0, rows, count), jnp.int32)
    return [checks.trusted.values("transpose", (tst.random_array((m, n), dtype, seed + 1),), kwargs=blocks,
                                  reference=TRANSPOSE),
            checks.trusted.values("gather_rows", (table, idx), reference=GATHER)]


TRUSTED = checks.trusted.Cases(_trusted_cases)
