"""Chapter 2's claims about jaxprs, JAX's tracing and Pallas' TPU lowering, read off the installed JAX.

docs/facts.md lists each claim with the README line it backs.
"""

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.extend import core as jex_core

from pytest_tpucourse.readers import mosaic

from .reading import MEASURED_JAX, readme_block, versions

# From JAX 0.11 on, ClosedJaxpr is another name for Jaxpr (which carries its consts), and the
# sub-programs in params are Jaxprs; in 0.10 they are ClosedJaxprs around Jaxprs.
ONE_JAXPR_CLASS = tuple(int(n) for n in jax.__version__.split(".")[:2]) >= (0, 11)


def _readme_example(x, w):
    return jax.nn.relu(x @ w).sum(axis=-1)


def test_the_readme_jaxpr_is_what_make_jaxpr_prints():
    closed = jax.make_jaxpr(_readme_example)(jnp.ones((4, 8)), jnp.ones((8, 16)))
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["dot_general", "custom_jvp_call", "reduce_sum"]
    if MEASURED_JAX:  # the very text the chapter shows
        assert str(closed).strip() == readme_block("ch02", "{ lambda ; a:f32[4,8]").strip(), versions()


def test_relu_is_a_custom_jvp_call_around_a_jit_around_one_max():
    [_, relu, _] = jax.make_jaxpr(_readme_example)(jnp.ones((4, 8)), jnp.ones((8, 16))).jaxpr.eqns
    assert relu.primitive.name == "custom_jvp_call"
    [inner] = relu.params["call_jaxpr"].jaxpr.eqns
    assert (inner.primitive.name, inner.params["name"]) == ("jit", "relu")
    [work] = inner.params["jaxpr"].jaxpr.eqns
    assert work.primitive.name == "max"
    literal = work.invars[1]
    assert isinstance(literal, jex_core.Literal) and literal.val == 0.0


def test_jnp_where_wraps_itself_in_a_jit():
    [eqn] = jax.make_jaxpr(jnp.where)(jnp.ones(3, bool), jnp.ones(3), jnp.zeros(3)).jaxpr.eqns
    assert (eqn.primitive.name, eqn.params["name"]) == ("jit", "_where")
    assert [e.primitive.name for e in eqn.params["jaxpr"].jaxpr.eqns] == ["select_n"]


def test_python_control_flow_runs_once_at_trace_time():
    calls = []

    def f(x):
        calls.append(x)
        for _ in range(3):
            x = x + 1.0
        return x if x.ndim == 1 else x.sum()

    eqns = jax.make_jaxpr(f)(jnp.ones(4)).jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["add", "add", "add"] and len(calls) == 1
    assert isinstance(calls[0], jax.core.Tracer) and (calls[0].shape, calls[0].dtype) == ((4,), jnp.float32)


def test_a_closed_jaxpr_has_the_parts_the_chapter_names():
    const = jnp.arange(3.0)
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) + const)(jnp.ones(3))
    assert isinstance(closed, jex_core.ClosedJaxpr) and len(closed.consts) == 1
    jaxpr = closed.jaxpr
    assert len(jaxpr.constvars) == 1 and len(jaxpr.invars) == 1 and len(jaxpr.outvars) == 1
    eqn = jaxpr.eqns[0]
    assert (eqn.primitive.name, eqn.primitive.multiple_results) == ("sin", False)
    assert isinstance(eqn.invars[0], jex_core.Var) and isinstance(eqn.params, dict)
    assert (jex_core.ClosedJaxpr is jex_core.Jaxpr) == ONE_JAXPR_CLASS, versions()
    assert (closed.jaxpr is closed) == ONE_JAXPR_CLASS, versions()


def _custom_vjp_sin():
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), x), lambda x, ct: (ct * jnp.cos(x),))
    return f


@pytest.mark.parametrize("program, primitive, params", [
    (lambda x: lax.cond(x.sum() > 0, lambda x: x * 2, lambda x: x + 1, x), "cond", ("branches",)),
    (lambda x: lax.scan(lambda c, y: (c + y, c), 0.0, x), "scan", ("jaxpr",)),
    (lambda x: lax.while_loop(lambda c: c.sum() < 3, lambda c: c + 1, x), "while", ("cond_jaxpr", "body_jaxpr")),
    (jax.jit(jnp.sin), "jit", ("jaxpr",)),
    (jax.nn.relu, "custom_jvp_call", ("call_jaxpr",)),
    (_custom_vjp_sin(), "custom_vjp_call", ("call_jaxpr",)),
], ids=["cond", "scan", "while", "jit", "custom_jvp_call", "custom_vjp_call"])
def test_sub_programs_live_in_these_params(program, primitive, params):
    [eqn] = [e for e in jax.make_jaxpr(program)(jnp.ones(3)).jaxpr.eqns if e.primitive.name == primitive]
    held = {name: type(value) for name, value in eqn.params.items()
            if isinstance(value, (jex_core.ClosedJaxpr, jex_core.Jaxpr))
            or (isinstance(value, tuple) and value and isinstance(value[0], (jex_core.ClosedJaxpr, jex_core.Jaxpr)))}
    assert set(held) == set(params), (held, versions())
    if primitive == "cond":
        assert all(isinstance(b, jex_core.ClosedJaxpr) for b in eqn.params["branches"])
        assert len(eqn.params["branches"]) == 2
    expected = jex_core.Jaxpr if ONE_JAXPR_CLASS else jex_core.ClosedJaxpr
    inner = eqn.params[params[0]][0] if primitive == "cond" else eqn.params[params[0]]
    assert type(inner) is expected, versions()


def test_bind_runs_a_primitive_and_a_call_primitive_eagerly():
    assert float(lax.add_p.bind(1.0, 2.0)) == 3.0
    [eqn] = jax.make_jaxpr(jax.jit(jnp.sin))(1.0).jaxpr.eqns
    [out] = eqn.primitive.bind(jnp.float32(0.5), **eqn.params)
    assert float(out) == pytest.approx(float(jnp.sin(0.5)))


def test_a_pallas_tpu_lowering_rule_emits_one_or_more_mosaic_ops_per_equation():
    def rowsum_of_cubes(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = jnp.sum(x_ref[...] ** 3, axis=-1, keepdims=True)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 1), jnp.float32))(x)

    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    [call] = jax.make_jaxpr(rowsum_of_cubes)(x).jaxpr.eqns
    body = [e.primitive.name for e in call.params["jaxpr"].eqns]
    assert body.count("integer_pow") == 1 and body.count("reduce_sum") == 1, body
    [kernel] = mosaic.kernels(rowsum_of_cubes, x)
    assert kernel.op_counts["arith.mulf"] == 2, kernel.op_counts
    assert kernel.op_counts["vector.multi_reduction"] == 1 and "dense<0.0" in kernel.text
    assert sum(kernel.op_counts.values()) > len(body), (kernel.op_counts, body)


@pytest.mark.parametrize("contraction, shapes", [
    (jnp.matmul, ((64, 32), (32, 16))),
    (lambda a, b: jnp.einsum("bqd,bkd->bqk", a, b), ((2, 3, 4), (2, 5, 4))),
    (jnp.matmul, ((3, 4), (4,))),
    (lambda a, b: jnp.tensordot(a, b, axes=2), ((2, 3, 4), (3, 4, 5))),
    (lambda a, b: jnp.einsum("i,j->ij", a, b), ((3,), (4,))),
], ids=["matmul", "batched einsum", "matrix-vector", "tensordot", "einsum outer product"])
def test_every_contraction_is_one_dot_general(contraction, shapes):
    jaxpr = jax.make_jaxpr(contraction)(*(jnp.ones(s) for s in shapes)).jaxpr
    names = []
    for eqn in jaxpr.eqns:  # einsum wraps itself in a jit
        inner = eqn.params.get("jaxpr")
        names += [e.primitive.name for e in inner.jaxpr.eqns] if inner is not None else [eqn.primitive.name]
    assert names.count("dot_general") == 1, names


def test_a_scan_holds_its_body_once_and_its_length_as_a_param():
    def ten_matmuls(x):
        return lax.scan(lambda c, _: (c @ c, None), x, None, length=10)[0]

    [eqn] = jax.make_jaxpr(ten_matmuls)(jnp.ones((8, 8))).jaxpr.eqns
    assert eqn.params["length"] == 10
    assert [e.primitive.name for e in eqn.params["jaxpr"].jaxpr.eqns] == ["dot_general"]


def test_a_cond_and_a_sort_bind_a_list_of_their_one_output():
    x = jnp.ones((8, 8))
    program = jax.make_jaxpr(lambda a: (lax.cond(a.sum() > 0, lambda a: a * 2, lambda a: a + 1, a),
                                        lax.sort(a, dimension=0)))(x)
    for name in ("cond", "sort"):
        [eqn] = [e for e in program.jaxpr.eqns if e.primitive.name == name]
        assert eqn.primitive.multiple_results and len(eqn.outvars) == 1, versions()
        operands = [jnp.int32(1), x] if name == "cond" else [x]  # a cond's branch index, then its operand
        result = eqn.primitive.bind(*operands, **eqn.params)
        assert isinstance(result, (list, tuple)) and len(result) == 1, (name, type(result), versions())
    [add] = jax.make_jaxpr(lambda a: a + a)(x).jaxpr.eqns
    assert not add.primitive.multiple_results and not isinstance(add.primitive.bind(x, x), (list, tuple))


def test_a_fori_loop_of_static_length_is_a_scan_and_of_traced_length_a_while():
    x = jnp.ones((8, 8))
    static = jax.make_jaxpr(lambda c: lax.fori_loop(0, 5, lambda i, c: jnp.sin(c), c))(x)
    traced = jax.make_jaxpr(lambda c, n: lax.fori_loop(0, n, lambda i, c: jnp.sin(c), c))(x, jnp.int32(5))
    assert [e.primitive.name for e in static.jaxpr.eqns] == ["scan"], versions()
    assert "while" in [e.primitive.name for e in traced.jaxpr.eqns], versions()
