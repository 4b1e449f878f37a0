"""Graded tests for ch11.matmul: matmul(x, y, *, bm, bk, bn)."""

from hypothesis import example, given

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

# (M, K, N, blocks). K spans several k steps in all but the single-block case, so
# an accumulator that is not initialised, not kept in f32, or run on a "parallel"
# k axis shows up.
CASES = (
    (128, 1024, 128, dict(bm=128, bk=128, bn=128)),  # 8 k steps
    (256, 512, 384, dict(bm=128, bk=128, bn=128)),  # non-square, 2 x 3 x 4 grid
    (128, 128, 256, dict(bm=128, bk=128, bn=128)),  # a single k step
)


def _check(impl, case, dtype, seed):
    m, k, n, blocks = case
    x = tst.random_array((m, k), dtype, seed)
    y = tst.random_array((k, n), dtype, seed + 1)
    out = impl.matmul.matmul(x, y, **blocks)
    checks.assert_close(
        out, tst.as_float64(x) @ tst.as_float64(y), fn=impl.matmul.matmul, dtype=dtype,
        repro=f"matmul(x{(m, k)}, y{(k, n)}, {blocks}) {dtype}, seed {seed}",
    )


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[0], seed=0)
@example(case=CASES[2], seed=0)
def test_matmul_f32(impl, case, seed):
    _check(impl, case, "float32", seed)


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[1], seed=0)
def test_matmul_bf16_accumulates_in_f32(impl, case, seed):
    _check(impl, case, "bfloat16", seed)


def test_matmul_is_one_kernel(impl):
    x = tst.random_array((128, 256), "bfloat16", 0)
    checks.assert_one_kernel(impl.matmul.matmul, x, x.T, bm=128, bk=128, bn=128)
