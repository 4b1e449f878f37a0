"""Gate 05's XLA floor is banded attention: the values of dense attention under the window mask,
for the work of the band (each query block against the keys its window reaches), as XLA counts it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_tpucourse import references
from pytest_tpucourse.instruments import capstone


def _dense(q, k, v, *, window):
    mask = references.sliding_window_mask(q.shape[2], k.shape[2], window)
    return references.attention_floor(q, k, v, mask), references.attention_logsumexp(q, k, mask)


def _flops(fn, *shapes):
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes]
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


CASES = [c for c in capstone.WINDOW_CASES] + [
    capstone._window_case("q longer than kv", 512, 256, 64, "float32", 128, 128, 100)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_banded_floor_gives_the_dense_masked_values(case):
    q, k, v = case.arrays(3)
    out, lse = references.sliding_window_attention_floor(q, k, v, **case.kwargs)
    want_out, want_lse = _dense(q, k, v, **case.kwargs)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.shape == q.shape[:3]
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want_out, np.float32), atol=2e-6, rtol=0)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(want_lse))  # rows that see no key
    np.testing.assert_allclose(np.where(np.isinf(want_lse), 0, lse), np.where(np.isinf(want_lse), 0, want_lse),
                               rtol=1e-5, atol=2e-6)


def test_grouped_query_heads_read_their_kv_head():
    q, k, v = capstone._window_case("gqa", 256, 256, 64, "float32", 128, 128, 64, heads=4).arrays(0)
    k, v = k[:, :2], v[:, :2]
    np.testing.assert_allclose(references.sliding_window_attention_floor(q, k, v, window=64)[0],
                               _dense(q, k, v, window=64)[0], atol=2e-6)


def test_the_banded_floor_does_the_bands_work_not_the_squares():
    """XLA's own FLOP count of each program: the band's two windows of keys per query, against the
    dense program's whole sequence (S / 2W = 4 times the work here)."""
    b, h, s, w, d = 1, 2, 2048, 256, 128
    shape = (b, h, s, d)
    band = 4 * b * h * s * (2 * w) * d  # two matmuls of 2 flops per multiply-add: q kᵀ and p v
    banded = _flops(lambda q, k, v: references.sliding_window_attention_floor(q, k, v, window=w), shape, shape,
                    shape)
    dense = _flops(lambda q, k, v: _dense(q, k, v, window=w), shape, shape, shape)
    assert band <= banded <= 1.1 * band
    assert dense >= 3.5 * banded
