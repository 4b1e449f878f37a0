"""Graded tests for ch11.fused_matmul: matmul_bias_act(x, w, b, *, activation, bm, bk, bn)."""

import numpy as np
import pytest
from hypothesis import example, given

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

CASES = (
    (128, 512, 256, dict(bm=128, bk=128, bn=128)),  # 4 k steps: the bias must be added once
    (256, 256, 128, dict(bm=128, bk=128, bn=128)),
)


def reference(x, w, b, activation):
    z = tst.as_float64(x) @ tst.as_float64(w) + tst.as_float64(b)
    if activation == "relu":
        return np.maximum(z, 0.0)
    if activation == "gelu":  # the tanh approximation
        return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))
    return z


@pytest.mark.parametrize("activation", ["relu", "gelu", "identity"])
@given(case=tst.few(*CASES), dtype=tst.dtypes(), seed=tst.seeds())
@example(case=CASES[0], dtype="float32", seed=0)
def test_matmul_bias_act(impl, activation, case, dtype, seed):
    m, k, n, blocks = case
    x = tst.random_array((m, k), dtype, seed)
    w = tst.random_array((k, n), dtype, seed + 1)
    b = tst.random_array((n,), dtype, seed + 2, scale=4.0)  # large enough to matter
    fn = impl.fused_matmul.matmul_bias_act
    out = fn(x, w, b, activation=activation, **blocks)
    checks.assert_close(
        out, reference(x, w, b, activation), fn=fn, dtype=dtype,
        repro=f"matmul_bias_act(x{(m, k)}, w{(k, n)}, b{(n,)}, activation={activation!r}, "
        f"{blocks}) {dtype}, seed {seed}",
    )


def test_bias_and_activation_are_fused(impl):
    x = tst.random_array((128, 256), "float32", 0)
    b = tst.random_array((128,), "float32", 1)
    checks.assert_one_kernel(impl.fused_matmul.matmul_bias_act, x, x.T[:, :128], b,
                             activation="gelu", bm=128, bk=128, bn=128)
