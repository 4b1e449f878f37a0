"""Graded tests for ch02.flops: dot_flops(closed_jaxpr)."""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import example, given
from jax import lax
from jax.experimental import pallas as pl

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst


def _arrays(*shapes):
    return [tst.random_array(s, "float32", i) for i, s in enumerate(shapes)]


def pallas_matmul(x, y, *, bm=32, bk=16, bn=64):
    """Chapter 11's tiled matmul: grid (M/bm, N/bn, K/bk), one (bm, bk) @ (bk, bn) dot per step."""
    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(x_ref[...], y_ref[...])

    (m, k), n = x.shape, y.shape[1]
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)))(x, y)


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
    # Executed, not written: a scan body runs `length` times; a cond runs one branch, the
    # most expensive one here (an upper bound of what runs).
    ("scan of 10 (8,8) matmuls", lambda c, w: lax.scan(lambda c, _: (c @ w, None), c, None, length=10)[0],
     [(8, 8), (8, 8)], 10 * 2 * 8 * 8 * 8),
    ("cond, 1 and 2 matmul branches",
     lambda p, a, b: lax.cond(p.sum() > 0, lambda a, b: a @ b, lambda a, b: (a @ b) @ b, a, b),
     [(4,), (8, 8), (8, 8)], 2 * (2 * 8 * 8 * 8)),
    # A kernel body runs once per grid point: 2 * 2 * 4 = 16 steps of one (32,16)@(16,64) dot.
    ("pallas_call matmul (64,64)@(64,128), grid (2, 2, 4)", pallas_matmul, [(64, 64), (64, 128)],
     (2 * 2 * 4) * (2 * 32 * 16 * 64)),
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


def test_dot_flops_refuses_a_while_loop_with_dots(impl):
    """A while_loop's trip count is known only when it runs: no count, a ValueError."""
    def doubling_until_large(x, w):
        return lax.while_loop(lambda c: c.sum() < 1e6, lambda c: c @ w, x)

    jaxpr = jax.make_jaxpr(doubling_until_large)(*_arrays((8, 8), (8, 8)))
    checks.assert_rejects(impl.flops.dot_flops, (jaxpr,), error=ValueError, mentions=("while",),
                          note="the jaxpr: jax.make_jaxpr(lambda x, w: lax.while_loop(..., lambda c: c @ w, x))(x, w)")


def _batched_matmul_jaxpr(b, m, k, n):
    return jax.make_jaxpr(lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y))(*_arrays((b, m, k), (b, k, n)))


def _scan_jaxpr(length, size):
    return jax.make_jaxpr(lambda c, w: lax.scan(lambda c, _: (c @ w, None), c, None, length=length)[0])(
        *_arrays((size, size), (size, size)))


def _mlp_jaxpr(batch, width, hidden, out):
    return jax.make_jaxpr(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2)(
        *_arrays((batch, width), (width, hidden), (hidden, out)))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): matmuls, a scan and an MLP of sizes
    drawn by the grader."""
    b, m, k, n = (int(rng.integers(1, 40)) for _ in range(4))
    length, size = int(rng.integers(2, 20)), int(rng.integers(2, 17))
    batch, width, hidden, out = (int(rng.integers(1, 65)) for _ in range(4))
    return [
        checks.trusted.exact("dot_flops", (checks.trusted.built(_batched_matmul_jaxpr, b, m, k, n),),
                             expected=2 * b * m * k * n, what="the FLOPs"),
        checks.trusted.exact("dot_flops", (checks.trusted.built(_scan_jaxpr, length, size),),
                             expected=length * 2 * size ** 3, what="the FLOPs"),
        checks.trusted.exact("dot_flops", (checks.trusted.built(_mlp_jaxpr, batch, width, hidden, out),),
                             expected=2 * batch * width * hidden + 2 * batch * hidden * out, what="the FLOPs"),
    ]


TRUSTED = checks.trusted.Cases(_trusted_cases)
