"""Graded tests for ch11.layernorm: layernorm(x, gamma, beta, *, eps, block_rows)."""

import numpy as np
from hypothesis import example, given

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

CASES = (
    ((64, 128), 16),
    ((48, 512), 16),
    ((16, 256), 16),  # one block
)
EPS = 1e-5


def reference(x, gamma, beta):
    z = tst.as_float64(x)
    mean = z.mean(axis=-1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch and flax
    return (z - mean) / np.sqrt(var + EPS) * tst.as_float64(gamma) + tst.as_float64(beta)


@given(case=tst.few(*CASES), dtype=tst.dtypes(), seed=tst.seeds())
@example(case=CASES[0], dtype="float32", seed=0)
@example(case=CASES[1], dtype="bfloat16", seed=0)
def test_layernorm_matches_reference(impl, case, dtype, seed):
    shape, block_rows = case
    # A non-zero mean and a spread far from 1, so both statistics matter.
    x = tst.random_array(shape, dtype, seed, scale=2.0, offset=3.0)
    gamma = tst.random_array(shape[-1:], dtype, seed + 1, offset=1.0)
    beta = tst.random_array(shape[-1:], dtype, seed + 2)
    out = impl.layernorm.layernorm(x, gamma, beta, eps=EPS, block_rows=block_rows)
    checks.assert_close(
        out, reference(x, gamma, beta), fn=impl.layernorm.layernorm, dtype=dtype,
        repro=f"layernorm(x{shape}, gamma, beta, block_rows={block_rows}) {dtype}, seed {seed}",
    )


def test_layernorm_is_one_kernel(impl):
    x = tst.random_array((32, 256), "float32", 0)
    g = tst.random_array((256,), "float32", 1)
    checks.assert_one_kernel(impl.layernorm.layernorm, x, g, g, eps=EPS, block_rows=16)
