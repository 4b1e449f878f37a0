"""Graded tests for ch11.layernorm: layernorm(x, gamma, beta, *, eps, block_rows)."""

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

ROWS = tst.dims_around(16, tile=8)  # row counts around block_rows=16: 8, 16, 48 and 40
CASES = (
    ((ROWS["above"], 128), 16),  # 3 row blocks
    ((ROWS["ragged"], 512), 16),  # ragged: the last row block is partial
    ((ROWS["equal"], 256), 16),  # one block
    ((ROWS["below"], 256), 16),  # fewer rows than a block: the block shrinks to them
    ((ROWS["ragged"], 512), 8),  # block_rows given: 5 blocks of 8 rows
)
EPS = 1e-5


def _inputs(shape, dtype, seed):
    # A non-zero mean and a spread far from 1, so both statistics matter.
    x = tst.random_array(shape, dtype, seed, scale=2.0, offset=3.0)
    gamma = tst.random_array(shape[-1:], dtype, seed + 1, offset=1.0)
    beta = tst.random_array(shape[-1:], dtype, seed + 2)
    return x, gamma, beta


def _check(impl, shape, block_rows, dtype, seed, kind="normal", eps=EPS):
    x, gamma, beta = _inputs(shape, dtype, seed)
    if kind != "normal":
        x = tst.random_array(shape, dtype, seed, kind=kind)
    checks.assert_matches_reference(
        impl.layernorm.layernorm, (x, gamma, beta),
        kwargs=dict(eps=eps, block_rows=block_rows), reference=references.LAYERNORM.bind(eps=eps))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layernorm_lowers_for_tpu(impl, dtype):
    tpu.assert_lowers_for_tpu(impl.layernorm.layernorm, *_inputs((256, 512), dtype, 0), compile_ahead=True)


@given(case=tst.few(*CASES), dtype=tst.dtypes(), seed=tst.seeds())
@example(case=CASES[1], dtype="bfloat16", seed=0)  # CASES[0] f32 at seed 0: the race test
@example(case=CASES[3], dtype="float32", seed=0)
@example(case=CASES[2], dtype="bfloat16", seed=1)
@example(case=CASES[4], dtype="float32", seed=1)
def test_layernorm_matches_reference(impl, case, dtype, seed):
    _check(impl, *case, dtype, seed)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layernorm_rows_with_variance_near_eps(impl, dtype):
    """Rows spread by about 3e-3 (variance about 1e-5, as large as eps): where eps goes,
    inside the square root or outside it, changes the result by tens of percent."""
    _check(impl, (48, 128), 16, dtype, 0, kind="low_variance")


def test_layernorm_uses_the_eps_it_is_given(impl):
    """eps=1e-3 on rows whose variance is about 1e-5: a hundred times the variance, so the result
    is about a tenth of the one at the default eps, and an eps left at 1e-5 is far off."""
    _check(impl, (48, 128), 16, "float32", 0, kind="low_variance", eps=1e-3)


def test_layernorm_is_one_kernel(impl):
    x, g, b = _inputs((32, 256), "float32", 0)
    checks.assert_one_kernel(impl.layernorm.layernorm, x, g, b, eps=EPS, block_rows=16)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layernorm_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks."""
    tpu.assert_compiles_for(impl.layernorm.layernorm, *_inputs((256, 512), dtype, 0))


def test_layernorm_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the 3 row blocks; the same call's values are checked too."""
    with tpu.checking_races(impl.layernorm.layernorm):
        _check(impl, *CASES[0], "float32", 0)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a ragged and a shrunk block on drawn
    dtypes, and rows whose variance is near eps, on values the tree has never seen."""
    cases = []
    for (shape, block_rows), dtype, kind in ((CASES[1], str(rng.choice(tst.DTYPES)), "normal"),
                                             (CASES[3], str(rng.choice(tst.DTYPES)), "normal"),
                                             (CASES[0], "float32", "low_variance")):
        seed = checks.trusted.seed(rng)
        x, gamma, beta = _inputs(shape, dtype, seed)
        if kind != "normal":
            x = tst.random_array(shape, dtype, seed, kind=kind)
        cases.append(checks.trusted.values(
            "layernorm", (x, gamma, beta), kwargs=dict(eps=EPS, block_rows=block_rows),
            reference=references.LAYERNORM.bind(eps=EPS),
            label=f"layernorm(x {dtype}{list(shape)}, ...) on {kind} rows"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
