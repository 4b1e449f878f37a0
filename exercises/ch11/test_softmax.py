"""Graded tests for ch11.softmax: softmax(x, *, block_rows)."""

import numpy as np
from hypothesis import example, given

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

CASES = (
    ((64, 256), 16),  # 4 row blocks
    ((40, 384), 16),  # ragged: the last row block is partial
    ((16, 128), 16),  # one block
)

# Logit scales: ordinary, and huge (exp overflows without the max subtraction).
SCALES = (1.0, 1e4)


def reference(x):
    z = tst.as_float64(x)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@given(case=tst.few(*CASES), dtype=tst.dtypes(), scale=tst.few(*SCALES), seed=tst.seeds())
@example(case=CASES[0], dtype="float32", scale=1e4, seed=0)
@example(case=CASES[1], dtype="bfloat16", scale=1.0, seed=0)
def test_softmax_matches_reference(impl, case, dtype, scale, seed):
    shape, block_rows = case
    x = tst.random_array(shape, dtype, seed, scale=scale)
    out = impl.softmax.softmax(x, block_rows=block_rows)
    checks.assert_close(
        out, reference(x), fn=impl.softmax.softmax, dtype=dtype,
        repro=f"softmax(x{shape}, block_rows={block_rows}) {dtype}, logit scale {scale}, seed {seed}",
    )


def test_softmax_of_equal_logits_is_uniform(impl):
    x = tst.random_array((16, 256), "float32", 0, scale=0.0, offset=3e4)
    checks.assert_close(impl.softmax.softmax(x, block_rows=16), np.full((16, 256), 1 / 256),
                        fn=impl.softmax.softmax, dtype="float32",
                        repro="softmax of rows that are all 3e4")


def test_softmax_is_one_kernel(impl):
    x = tst.random_array((32, 256), "float32", 0)
    checks.assert_one_kernel(impl.softmax.softmax, x, block_rows=16)
