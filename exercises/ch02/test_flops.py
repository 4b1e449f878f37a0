"""Graded tests for ch02.flops: dot_flops(closed_jaxpr)."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import example, given
from jax import lax

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst


def _arrays(*shapes):
    return [tst.random_array(s, "float32", i) for i, s in enumerate(shapes)]


# (name, function, input shapes, FLOPs worked out by hand)
CASES = [
    ("matmul (64,32)@(32,16)", lambda a, b: a @ b, [(64, 32), (32, 16)], 2 * 64 * 32 * 16),
    ("vector dot, k=100", jnp.dot, [(100,), (100,)], 2 * 100),
    ("two contracting dims", lambda a, b: lax.dot_general(a, b, (((1, 2), (0, 1)), ((), ()))),
     [(4, 5, 6), (5, 6, 7)], 2 * (4 * 7) * (5 * 6)),
    ("jit(batched einsum)", jax.jit(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b)),
     [(4, 8, 16), (4, 16, 32)], 2 * (4 * 8 * 32) * 16),
    ("mlp, relu between", lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2,
     [(8, 16), (16, 64), (64, 4)], 2 * 8 * 16 * 64 + 2 * 8 * 64 * 4),
    ("attention q(1,2,16,8) k,v(1,2,24,8)",
     lambda q, k, v: references.attention_floor(q, k, v, causal=True),
     [(1, 2, 16, 8), (1, 2, 24, 8), (1, 2, 24, 8)], 2 * (2 * 16 * 24) * 8 + 2 * (2 * 16 * 8) * 24),
    ("no dot at all", lambda x: jnp.tanh(x) * 3.0, [(64, 64)], 0),
]


def _check(impl, name, f, shapes, want):
    fn = impl.flops.dot_flops
    got = fn(jax.make_jaxpr(f)(*_arrays(*shapes)))
    checks.assert_equal(got, want, fn=fn, what=f"the FLOPs of {name}",
                        note=f"the jaxpr of CASES {name!r} of exercises/ch02/test_flops.py, on inputs of "
                             f"shapes {shapes}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_dot_flops(impl, case):
    _check(impl, *case)


@given(b=tst.few(1, 3), m=tst.few(8, 24), k=tst.few(16, 40), n=tst.few(8, 128))
@example(b=3, m=24, k=40, n=8)
def test_dot_flops_batched_matmul(impl, b, m, k, n):
    _check(impl, f"einsum bmk,bkn->bmn with b={b} m={m} k={k} n={n}",
           lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y), [(b, m, k), (b, k, n)], 2 * b * m * k * n)
