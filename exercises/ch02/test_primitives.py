"""Graded tests for ch02.primitives: count_primitives(fn, *args)."""

from collections import Counter

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from pytest_tpucourse import checks, references, ir
from pytest_tpucourse import strategies as tst


@jax.custom_vjp
def _scaled_sin(x):
    return jnp.sin(x) * 2.0


_scaled_sin.defvjp(lambda x: (_scaled_sin(x), x), lambda x, g: (g * jnp.cos(x) * 2.0,))


def _flat(x):
    return jnp.tanh(x) * 2.0 + x


def _nested_jit(x):
    inner = jax.jit(lambda a: jnp.sin(a) * a)
    return jax.jit(lambda a: inner(a) + inner(a * 2.0))(x)


def _relu_mlp(x):
    return jax.nn.relu(x @ x.T) @ x  # relu is a custom_jvp holding a jit holding max


def _cond(x):
    return lax.cond(x[0, 0] > 0, lambda a: jnp.sin(a), lambda a: jnp.cos(a) + 1.0, x)


def _scan(x):
    return lax.scan(lambda c, row: (c + jnp.tanh(row), c.sum()), x[0], x)[0]


def _custom_vjp(x):
    return _scaled_sin(x) + 1.0


def _attention(x):
    q = x.reshape(1, 2, 8, 8)
    return references.attention_floor(q, q, q, causal=True)


PROGRAMS = {
    "flat": _flat,
    "nested_jit": _nested_jit,
    "relu_mlp": _relu_mlp,
    "cond": _cond,
    "scan": _scan,
    "custom_vjp": _custom_vjp,
    "attention": _attention,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_count_primitives(impl, name):
    fn = PROGRAMS[name]
    x = tst.random_array((16, 8), "float32", 0)
    got = impl.primitives.count_primitives(fn, x)
    want = Counter(ir.primitives_outside_kernels(jax.make_jaxpr(fn)(x)))
    graded = impl.primitives.count_primitives
    note = f"the program is PROGRAMS[{name!r}] of exercises/ch02/test_primitives.py"
    if not isinstance(got, dict):
        checks.fail(graded, f"{graded.display} should return a dict, got {type(got).__name__}", note=note)
    checks.assert_equal(dict(got), dict(sorted(want.items())), fn=graded,
                        what=f"the primitive counts of the {name!r} program", note=note)


# Programs for the trusted check (docs/grading.md): a chain of shape-keeping pieces drawn by the
# grader, so the program counted is one the tree has never seen.
CHAINABLE = ("flat", "nested_jit", "relu_mlp", "cond", "custom_vjp")


def _chain(names):
    """The program that applies the named PROGRAMS one after the other (each keeps x's shape)."""
    pieces = [PROGRAMS[name] for name in names]

    def program(x):
        for piece in pieces:
            x = piece(x)
        return x
    return program


def _expected_counts(program, x):
    return dict(sorted(Counter(ir.primitives_outside_kernels(jax.make_jaxpr(program)(x))).items()))


def _trusted_cases(rng):
    cases = []
    for length in (2, 3):
        names = tuple(str(n) for n in rng.choice(CHAINABLE, size=length))
        x = tst.random_array((16, 8), "float32", checks.trusted.seed(rng))
        cases.append(checks.trusted.exact(
            "count_primitives", (checks.trusted.built(_chain, names, label=f"the chain {' > '.join(names)}"), x),
            expected=_expected_counts, what="the primitive counts"))
    name = str(rng.choice(["scan", "attention"]))
    cases.append(checks.trusted.exact(
        "count_primitives", (checks.trusted.built(_chain, (name,), label=f"PROGRAMS[{name!r}]"),
                             tst.random_array((16, 8), "float32", checks.trusted.seed(rng))),
        expected=_expected_counts, what="the primitive counts"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
