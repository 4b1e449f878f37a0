"""Graded tests for ch02.interpreter: eval_jaxpr(closed_jaxpr, *args, on_eqn=None).

Programs are drawn by hypothesis from a small op set over (8, 8) float32
registers: add, mul, sin, tanh, dot, reduce_sum, where, a closed-over constant,
a jitted sub-function, a custom_jvp function, a custom_vjp function, a cond and a
sort. The last two bind primitives with one output whose rule returns a list of it
(`multiple_results`): an interpreter that decides by the number of outputs wraps
their list in another.
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from jax import lax

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

# Equations the interpreter must recurse into rather than bind, and the param holding the sub-program.
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
         "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr"}

CONST = jnp.asarray(np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(8, 8))


@jax.jit
def _jitted(a, b):
    return jnp.tanh(a) * b + 1.0


@jax.custom_jvp
def _softplus(a):
    return jnp.logaddexp(a, 0.0)


_softplus.defjvp(lambda p, t: (_softplus(p[0]), jax.nn.sigmoid(p[0]) * t[0]))


@jax.custom_vjp
def _half(a):
    return a * 0.5


_half.defvjp(lambda a: (_half(a), None), lambda _, g: (g * 0.5,))

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "sin": lambda a, b: jnp.sin(a),
    "tanh": lambda a, b: jnp.tanh(a),
    "dot": lambda a, b: jnp.dot(a, b) / 8.0,
    "reduce_sum": lambda a, b: jnp.sum(a, axis=0, keepdims=True) * 0.1 + b,
    "where": lambda a, b: jnp.where(a > b, a, b),
    "const": lambda a, b: a * CONST,
    "jit": lambda a, b: _jitted(a, b),
    "custom_jvp": lambda a, b: _softplus(a),
    "custom_vjp": lambda a, b: _half(a) - b,
    # One output each, bound as a list of it (primitive.multiple_results): a cond (its branches
    # are bound with it, not walked) and a sort.
    "cond": lambda a, b: lax.cond(jnp.sum(a) > jnp.sum(b), lambda a, b: a * b, lambda a, b: a - b, a, b),
    "sort": lambda a, b: jnp.sort(a, axis=0) + b,
}


@st.composite
def programs(draw):
    """A straight-line program: each step applies one op to two earlier registers."""
    steps = []
    for n in range(draw(st.integers(1, 7))):
        registers = 2 + n
        steps.append((draw(st.sampled_from(sorted(OPS))), draw(st.integers(0, registers - 1)),
                      draw(st.integers(0, registers - 1))))
    return tuple(steps)


EVERY_OP = tuple((op, i + 1, i) for i, op in enumerate(OPS))


def _function(program):
    def f(x, y):
        registers = [x, y]
        for op, i, j in program:
            registers.append(OPS[op](registers[i], registers[j]))
        return registers[-1], registers[-2]
    return f


def _describe(program):
    return "; ".join(f"r{k + 2} = {op}(r{i}, r{j})" for k, (op, i, j) in enumerate(program))


@given(program=programs(), seed=tst.seeds())
@example(program=EVERY_OP, seed=0)
def test_eval_jaxpr_agrees_with_jit(impl, program, seed):
    fn = impl.interpreter.eval_jaxpr
    f = _function(program)
    x = tst.random_array((8, 8), "float32", seed)
    y = tst.random_array((8, 8), "float32", seed + 1)
    with checks.at_graded_precision(x, y):  # its dots carry the precision the floor, jax.jit(f), runs at
        closed = jax.make_jaxpr(f)(x, y)
    got = fn(closed, x, y)
    note = f"closed_jaxpr = jax.make_jaxpr(f)(x, y), f: {_describe(program)}"
    if not (isinstance(got, (list, tuple)) and len(got) == 2):
        checks.fail(fn, f"{fn.display} should return a list of the program's 2 outputs, got {type(got).__name__}"
                        f"{'' if not isinstance(got, (list, tuple)) else f' of {len(got)}'}", note=note)
    # The oracle is the program itself in float64; its floor is jax.jit of it in float32.
    reference = references.Reference(f"f: {_describe(program)}", f, jax.jit(f))
    checks.assert_matches_reference(
        checks.graded(lambda *_: tuple(got), f"{fn.display} on the drawn program"), (x, y),
        reference=reference, require_kernel=False, names=["output 0", "output 1"],
        note=f"the outputs of eval_jaxpr(closed_jaxpr, x, y); {note}")


@given(program=programs())
@example(program=EVERY_OP)
def test_eval_jaxpr_binds_every_primitive_once_in_order(impl, program):
    """on_eqn sees exactly the primitives the program runs, sub-programs flattened, in order."""
    fn = impl.interpreter.eval_jaxpr
    f = _function(program)
    x = tst.random_array((8, 8), "float32", 0)
    closed = jax.make_jaxpr(f)(x, x)
    seen = []
    fn(closed, x, x, on_eqn=lambda eqn: seen.append(eqn.primitive.name))
    want = _primitives_bound(closed)
    checks.assert_equal(seen, want, fn=fn, what="the primitives it called on_eqn for (every bound primitive, "
                        "jit and custom_* sub-programs recursed into, in evaluation order)",
                        note=f"closed_jaxpr = jax.make_jaxpr(f)(x, x), f: {_describe(program)}")


def _program_jaxpr(program):
    """The closed jaxpr of a drawn program on (8, 8) float32 inputs."""
    x = jnp.zeros((8, 8), jnp.float32)
    return jax.make_jaxpr(_function(program))(x, x)


def _primitives_seen(graded, closed, x, y):
    """What eval_jaxpr called on_eqn for, in order."""
    seen = []
    graded(closed, x, y, on_eqn=lambda eqn: seen.append(eqn.primitive.name))
    return seen


def _primitives_bound(closed, *_):
    """What the interpreter binds, in evaluation order: call primitives recursed into, every other
    equation (a cond, a sort) bound whole."""
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in CALLS:
                sub = eqn.params[CALLS[eqn.primitive.name]]
                yield from walk(getattr(sub, "jaxpr", sub))  # a ClosedJaxpr's, or a Jaxpr (JAX 0.11 on)
            else:
                yield eqn.primitive.name
    return list(walk(closed.jaxpr))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): programs drawn by the grader over the
    same ops, their outputs and the primitives the interpreter binds."""
    cases = []
    for _ in range(2):
        program = tuple((str(rng.choice(sorted(OPS))), int(rng.integers(0, 2 + n)), int(rng.integers(0, 2 + n)))
                        for n in range(int(rng.integers(3, 8))))
        f = _function(program)
        seed = checks.trusted.seed(rng)
        x, y = tst.random_array((8, 8), "float32", seed), tst.random_array((8, 8), "float32", seed + 1)
        closed = checks.trusted.built(_program_jaxpr, program, label=f"the jaxpr of {_describe(program)}")
        cases.append(checks.trusted.values(
            "eval_jaxpr", (closed, x, y), names=("output 0", "output 1"), reference_args=(1, 2),
            reference=references.Reference(f"f: {_describe(program)}", f, jax.jit(f))))
        cases.append(checks.trusted.exact(
            "eval_jaxpr", (closed, x, y), through=_primitives_seen,
            expected=lambda closed, x, y: _primitives_bound(closed),
            what="the primitives it called on_eqn for"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
