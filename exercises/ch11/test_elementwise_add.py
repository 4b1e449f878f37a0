"""Graded tests for ch11.elementwise_add: add(x, y, *, block_shape)."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

BLOCK = {"float32": (8, 128), "bfloat16": (16, 128)}  # one tile: several blocks on every shape


def _check(impl, shape, dtype, block_shape, seed):
    x = tst.random_array(shape, dtype, seed)
    y = tst.random_array(shape, dtype, seed + 1)
    checks.assert_matches_reference(
        impl.elementwise_add.add, (x, y), kwargs=dict(block_shape=block_shape),
        reference=references.ADD)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_add_lowers_for_tpu(impl, dtype):
    x = tst.random_array((512, 1024), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.elementwise_add.add, x, x, compile_ahead=True)


@given(data=st.data(), dtype=tst.dtypes(), seed=tst.seeds())
def test_add_matches_reference(impl, data, dtype, seed):
    shape = data.draw(tst.tiled_shapes(dtype, kinds=("single", "multi", "ragged")), label="shape")
    _check(impl, shape, dtype, BLOCK[dtype], seed)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["single", "multi", "ragged", "degenerate"])
def test_add_tile_shapes(impl, kind, dtype):
    """A single tile, 2 x 3 tiles, partial last blocks, and arrays with a length-1 axis. Run as the
    race test runs (two cores, race detector), whose ragged f32 case is one of these programs."""
    with tpu.checking_races(impl.elementwise_add.add):
        for shape in tst.shapes_2d(dtype, kind):
            _check(impl, shape, dtype, BLOCK[dtype], seed=0)


@given(seed=tst.seeds())
@example(seed=0)
def test_add_large_blocks(impl, seed):
    """The default block_shape on an array smaller than one block."""
    _check(impl, (200, 700), "float32", (256, 512), seed)


def test_add_is_one_kernel(impl):
    x = tst.random_array((64, 256), "float32", 0)
    checks.assert_one_kernel(impl.elementwise_add.add, x, x, block_shape=(32, 128))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_add_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks."""
    x = tst.random_array((512, 1024), dtype, 0)
    tpu.assert_compiles_for(impl.elementwise_add.add, x, x)


def test_add_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split a ragged 2 x 3 grid of blocks; its values are checked too."""
    with tpu.checking_races(impl.elementwise_add.add):
        _check(impl, tst.shapes_2d("float32", "ragged")[0], "float32", BLOCK["float32"], seed=1)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a ragged and a multi-block shape in a
    dtype each, and a length-1 axis, on values the tree has never seen."""
    cases = []
    for kind, dtype in (("ragged", "float32"), ("multi", "bfloat16"), ("degenerate", str(rng.choice(tst.DTYPES)))):
        shapes = tst.shapes_2d(dtype, kind)
        shape = shapes[int(rng.integers(len(shapes)))]
        seed = checks.trusted.seed(rng)
        x, y = tst.random_array(shape, dtype, seed), tst.random_array(shape, dtype, seed + 1)
        cases.append(checks.trusted.values("add", (x, y), kwargs=dict(block_shape=BLOCK[dtype]),
                                           reference=references.ADD))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
