"""Graded tests for ch10.costs: matmul_cost(m, k, n, itemsize)."""

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks


@given(m=st.integers(1, 8192), k=st.integers(1, 8192), n=st.integers(1, 8192), itemsize=st.sampled_from([1, 2, 4]))
@example(m=4096, k=4096, n=4096, itemsize=2)
@example(m=8, k=4096, n=4096, itemsize=2)  # skinny: the weights dominate the bytes
@example(m=1, k=8192, n=3, itemsize=1)  # every itemsize, and sizes unequal down to 1
@example(m=8192, k=1, n=5, itemsize=4)
def test_matmul_cost(impl, m, k, n, itemsize):
    flops, nbytes = impl.costs.matmul_cost(m, k, n, itemsize)
    checks.assert_close(np.float64(flops), 2.0 * m * k * n, fn=impl.costs.matmul_cost, dtype="float64",
                        what="FLOPs")
    checks.assert_close(np.float64(nbytes), float((m * k + k * n + m * n) * itemsize), fn=impl.costs.matmul_cost,
                        dtype="float64", what="HBM bytes (x read, y read, output written)")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): matmuls the grader draws."""
    cases = []
    for _ in range(4):
        m, k, n = (int(rng.integers(1, 8193)) for _ in range(3))
        itemsize = int(rng.choice([1, 2, 4]))
        cases.append(checks.trusted.exact("matmul_cost", (m, k, n, itemsize),
                                          expected=(2.0 * m * k * n, float((m * k + k * n + m * n) * itemsize)),
                                          compare=checks.trusted.close(rtol=1e-12)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
