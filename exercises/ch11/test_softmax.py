"""Graded tests for ch11.softmax: softmax(x, *, block_rows)."""

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

ROWS = tst.dims_around(16, tile=8)  # row counts around block_rows=16: 8, 16, 48 and 40
CASES = (
    ((ROWS["above"], 256), 16),  # 3 row blocks
    ((ROWS["ragged"], 384), 16),  # ragged: the last row block is partial
    ((ROWS["equal"], 128), 16),  # one block
    ((ROWS["below"], 256), 16),  # fewer rows than a block: the block shrinks to them
    ((ROWS["ragged"], 384), 8),  # block_rows given: 5 blocks of 8 rows
)


def _check(impl, shape, block_rows, dtype, kind, seed):
    x = tst.random_array(shape, dtype, seed, kind=kind)
    checks.assert_matches_reference(
        impl.softmax.softmax, (x,), kwargs=dict(block_rows=block_rows), reference=references.SOFTMAX)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_lowers_for_tpu(impl, dtype):
    tpu.assert_lowers_for_tpu(impl.softmax.softmax, tst.random_array((256, 512), dtype, 0), compile_ahead=True)


@given(case=tst.few(*CASES), dtype=tst.dtypes(), kind=tst.few("normal", "large"), seed=tst.seeds())
@example(case=CASES[1], dtype="bfloat16", kind="normal", seed=0)
@example(case=CASES[3], dtype="float32", kind="normal", seed=0)
@example(case=CASES[0], dtype="bfloat16", kind="normal", seed=1)  # (48, 256) f32 normal: the race test
@example(case=CASES[2], dtype="float32", kind="normal", seed=1)
@example(case=CASES[4], dtype="float32", kind="normal", seed=1)
@example(case=CASES[0], dtype="bfloat16", kind="large", seed=2)  # (48, 256) f32 large: the corner cases
@example(case=CASES[1], dtype="float32", kind="large", seed=2)
@example(case=CASES[2], dtype="bfloat16", kind="large", seed=2)
@example(case=CASES[3], dtype="bfloat16", kind="large", seed=2)
@example(case=CASES[4], dtype="bfloat16", kind="large", seed=2)
def test_softmax_matches_reference(impl, case, dtype, kind, seed):
    _check(impl, *case, dtype, kind, seed)


@pytest.mark.parametrize("kind", ["large", "spike", "equal_rows", "tiny", "masked"])
def test_softmax_value_corner_cases(impl, kind):
    """Logits of 1e4 (exp overflows without the max subtraction), one huge logit per row
    among ordinary ones, equal rows, tiny values, -inf. Run as the race test runs (two cores,
    race detector, 3 row blocks): one compiled program for both."""
    with tpu.checking_races(impl.softmax.softmax):
        _check(impl, (48, 256), 16, "float32", kind, seed=0)


def test_softmax_is_one_kernel(impl):
    x = tst.random_array((32, 256), "float32", 0)
    checks.assert_one_kernel(impl.softmax.softmax, x, block_rows=16)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks."""
    tpu.assert_compiles_for(impl.softmax.softmax, tst.random_array((256, 512), dtype, 0))


def test_softmax_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the 3 row blocks; the same call's values are checked too."""
    with tpu.checking_races(impl.softmax.softmax):
        _check(impl, (48, 256), 16, "float32", "normal", seed=0)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a ragged and a shrunk block on drawn
    dtypes and value kinds, and one huge logit per row, on values the tree has never seen."""
    draws = [(CASES[1], str(rng.choice(tst.DTYPES)), str(rng.choice(["normal", "large"]))),
             (CASES[3], str(rng.choice(tst.DTYPES)), "normal"),
             (CASES[0], "float32", str(rng.choice(["spike", "masked"])))]
    cases = []
    for (shape, block_rows), dtype, kind in draws:
        x = tst.random_array(shape, dtype, checks.trusted.seed(rng), kind=kind)
        cases.append(checks.trusted.values("softmax", (x,), kwargs=dict(block_rows=block_rows),
                                           reference=references.SOFTMAX, label=f"softmax(x {dtype}{list(shape)}, "
                                           f"block_rows={block_rows}) on {kind} values"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
