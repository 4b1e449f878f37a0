"""Graded tests for ch02.flops: dot_flops(closed_jaxpr)."""

import functools

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


def pallas_row_blocks(x, y, *, bm=16, bn=32, halves=False):
    """A 2-D grid (M/bm, N/bn), all of K in each step: one (bm, K) @ (K, bn) dot per step, or (halves)
    the same dot as two (bm, K/2) @ (K/2, bn) dots in a loop inside the kernel."""
    (m, k), n = x.shape, y.shape[1]

    def kernel(x_ref, y_ref, o_ref):
        if not halves:
            o_ref[...] = jnp.dot(x_ref[...], y_ref[...])
            return
        half = k // 2

        def step(h, acc):
            start = pl.multiple_of(h * half, half)
            return acc + jnp.dot(x_ref[:, pl.ds(start, half)], y_ref[pl.ds(start, half), :])

        o_ref[...] = lax.fori_loop(0, 2, step, jnp.zeros(o_ref.shape, o_ref.dtype))

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)))(x, y)


def pallas_add(x, y, *, bm=16):
    """An elementwise kernel on a 1-D grid: no dot at all."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    spec = pl.BlockSpec((bm, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // bm,),
                          in_specs=[spec, spec], out_specs=spec)(x, y)


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
                        note=f"the jaxpr of the case {name!r} of exercises/ch02/test_flops.py, on inputs of "
                             f"shapes {shapes}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_dot_flops(impl, case):
    _check(impl, *case)


# Programs holding a pallas_call: grids of every rank, kernels with no dot, a dot inside a loop of the
# kernel, dots outside the call before it, the call inside a jit and inside a scan.
def _mm(m, k, n):
    return 2 * m * k * n


PALLAS_CASES = [
    ("a matmul, then pallas_call matmul (64,64)@(64,128) on grid (2, 2, 4)",
     lambda w, x, y: pallas_matmul(w @ x, y), [(64, 32), (32, 64), (64, 128)], _mm(64, 32, 64) + _mm(64, 64, 128)),
    ("pallas_call matmul (48,64)@(64,96) on grid (3, 3), all of K per step",
     pallas_row_blocks, [(48, 64), (64, 96)], (3 * 3) * _mm(16, 64, 32)),
    ("pallas_call matmul (48,64)@(64,96) on grid (3, 3), K in two halves in a fori_loop of the kernel",
     functools.partial(pallas_row_blocks, halves=True), [(48, 64), (64, 96)], (3 * 3) * 2 * _mm(16, 32, 32)),
    ("pallas_call add (64,128) on grid (4,), then a matmul",
     lambda x, y, w: pallas_add(x, y) @ w, [(64, 128), (64, 128), (128, 8)], _mm(64, 128, 8)),
    ("jit(pallas_call matmul (96,32)@(32,64) on grid (3, 1, 2), bm=32 bk=16 bn=64)",
     jax.jit(pallas_matmul), [(96, 32), (32, 64)], (3 * 1 * 2) * _mm(32, 16, 64)),
    ("scan of 3 pallas_call matmuls (32,16)@(16,64) on grid (1, 1, 1)",
     lambda c, w: lax.scan(lambda c, _: (pallas_matmul(c, w) @ w.T, None), c, None, length=3)[0],
     [(32, 16), (16, 64)], 3 * (_mm(32, 16, 64) + _mm(32, 64, 16))),
]


@pytest.mark.parametrize("case", PALLAS_CASES, ids=[c[0] for c in PALLAS_CASES])
def test_dot_flops_of_programs_holding_a_pallas_call(impl, case):
    _check(impl, *case)


# Loops without a dot count nothing and are no reason to refuse: only a while loop with a dot in its
# body or its condition has no count.
LOOP_CASES = [
    ("a while_loop without a dot, then a matmul",
     lambda x, w: lax.while_loop(lambda c: jnp.sum(c) < 1e3, lambda c: c * 2.0 + 1.0, x) @ w,
     [(8, 16), (16, 4)], _mm(8, 16, 4)),
    ("a matmul, then a fori_loop of 5 steps without a dot",
     lambda x, w: lax.fori_loop(0, 5, lambda i, c: jnp.sin(c) * 0.5, x @ w), [(8, 16), (16, 4)], _mm(8, 16, 4)),
    ("a while_loop with a traced trip count and no dot",
     lambda x, n: lax.fori_loop(0, n.astype(jnp.int32).sum(), lambda i, c: jnp.tanh(c), x), [(8, 8), (2,)], 0),
]


@pytest.mark.parametrize("case", LOOP_CASES, ids=[c[0] for c in LOOP_CASES])
def test_dot_flops_of_loops_without_a_dot(impl, case):
    _check(impl, *case)


@given(b=tst.few(1, 3), m=tst.few(8, 24), k=tst.few(16, 40), n=tst.few(8, 128))
@example(b=3, m=24, k=40, n=8)
@example(b=1, m=8, k=16, n=128)
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


def test_dot_flops_refuses_a_while_loop_whose_condition_holds_the_dot(impl):
    """The condition runs once per step too: its dot has no count either."""
    def until_the_product_is_large(x, w):
        return lax.while_loop(lambda c: jnp.sum(c @ w) < 1e6, lambda c: c * 2.0, x)

    jaxpr = jax.make_jaxpr(until_the_product_is_large)(*_arrays((8, 8), (8, 8)))
    checks.assert_rejects(impl.flops.dot_flops, (jaxpr,), error=ValueError, mentions=("while",),
                          note="the jaxpr: jax.make_jaxpr(lambda x, w: lax.while_loop(lambda c: "
                               "jnp.sum(c @ w) < 1e6, lambda c: c * 2.0, x))(x, w)")


def _batched_matmul_jaxpr(b, m, k, n):
    return jax.make_jaxpr(lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y))(*_arrays((b, m, k), (b, k, n)))


def _scan_jaxpr(length, size):
    return jax.make_jaxpr(lambda c, w: lax.scan(lambda c, _: (c @ w, None), c, None, length=length)[0])(
        *_arrays((size, size), (size, size)))


def _mlp_jaxpr(batch, width, hidden, out):
    return jax.make_jaxpr(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2)(
        *_arrays((batch, width), (width, hidden), (hidden, out)))


def _row_blocks_jaxpr(row_blocks, column_blocks, k, halves):
    """The jaxpr of pallas_row_blocks on a (row_blocks, column_blocks) grid of (16, k) @ (k, 32) steps."""
    return jax.make_jaxpr(functools.partial(pallas_row_blocks, halves=halves))(
        *_arrays((16 * row_blocks, k), (k, 32 * column_blocks)))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): matmuls, a scan, an MLP and a pallas_call
    on a 2-D grid, of sizes drawn by the grader."""
    b, m, k, n = (int(rng.integers(1, 40)) for _ in range(4))
    length, size = int(rng.integers(2, 20)), int(rng.integers(2, 17))
    batch, width, hidden, out = (int(rng.integers(1, 65)) for _ in range(4))
    rows, columns, depth = int(rng.integers(1, 5)), int(rng.integers(1, 5)), 32 * int(rng.integers(1, 5))
    halves = bool(rng.integers(2))
    return [
        checks.trusted.exact("dot_flops", (checks.trusted.built(_batched_matmul_jaxpr, b, m, k, n),),
                             expected=2 * b * m * k * n, what="the FLOPs"),
        checks.trusted.exact("dot_flops", (checks.trusted.built(_scan_jaxpr, length, size),),
                             expected=length * 2 * size ** 3, what="the FLOPs"),
        checks.trusted.exact("dot_flops", (checks.trusted.built(_mlp_jaxpr, batch, width, hidden, out),),
                             expected=2 * batch * width * hidden + 2 * batch * hidden * out, what="the FLOPs"),
        checks.trusted.exact("dot_flops", (checks.trusted.built(_row_blocks_jaxpr, rows, columns, depth, halves),),
                             expected=rows * columns * _mm(16, depth, 32), what="the FLOPs"),
    ]


TRUSTED = checks.trusted.Cases(_trusted_cases)
