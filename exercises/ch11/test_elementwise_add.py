"""Graded tests for ch11.elementwise_add: add(x, y, *, block_shape)."""

from hypothesis import example, given

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

# (shape, block_shape): few distinct shapes, since each one compiles a kernel.
CASES = (
    ((512, 1024), (256, 512)),  # 2 x 2 grid of full blocks
    ((64, 256), (256, 512)),  # one block, clamped to the array
    ((200, 700), (64, 256)),  # ragged: the last row and column blocks are partial
)


@given(case=tst.few(*CASES), dtype=tst.dtypes(), seed=tst.seeds())
@example(case=CASES[2], dtype="float32", seed=0)
@example(case=CASES[1], dtype="bfloat16", seed=1)
def test_add_matches_reference(impl, case, dtype, seed):
    shape, block_shape = case
    x = tst.random_array(shape, dtype, seed)
    y = tst.random_array(shape, dtype, seed + 1)
    out = impl.elementwise_add.add(x, y, block_shape=block_shape)
    checks.assert_close(
        out, tst.as_float64(x) + tst.as_float64(y), fn=impl.elementwise_add.add, dtype=dtype,
        repro=f"add(x, y, block_shape={block_shape}) with x, y {shape} {dtype}, seed {seed}",
    )


def test_add_is_one_kernel(impl):
    x = tst.random_array((64, 256), "float32", 0)
    checks.assert_one_kernel(impl.elementwise_add.add, x, x, block_shape=(32, 128))
