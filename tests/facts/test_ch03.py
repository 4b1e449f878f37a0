"""Chapter 3's claims about StableHLO, JAX's lowering and what `precision` means to XLA and Mosaic.

docs/facts.md lists each claim with the README line it backs. The v5e tests compile with the
real TPU compiler (libtpu, the tpu-compile extra) and skip without it.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl

from pytest_tpucourse import references

from .reading import MEASURED_JAX, cpu_hlo, readme_block, v5e_hlo, v5e_kernel, versions


def _stablehlo(fn, *shapes):
    return jax.jit(fn).lower(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)).as_text()


def _ops(text):
    return re.findall(r"\b(stablehlo\.\w+|call @[\w\"<>]+|func\.func (?:public|private))", text)


def test_the_readme_stablehlo_is_what_lower_prints():
    printed = _stablehlo(lambda q, k: jnp.einsum("bqd,bkd->bqk", q, k), (2, 3, 4), (2, 5, 4))
    assert "batching_dims = [0] x [0], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT]" in printed
    if MEASURED_JAX:  # the very text the chapter shows
        assert printed.strip() == readme_block("ch03", "module @jit__lambda").strip(), versions()


def test_primitives_lower_to_the_ops_the_chapter_names():
    assert "stablehlo.tanh" in _ops(_stablehlo(jnp.tanh, (3,)))
    assert "stablehlo.exponential" in _ops(_stablehlo(jnp.exp, (3,)))
    reduce = _stablehlo(lambda x: x.sum(-1), (3, 4))
    assert "stablehlo.reduce" in _ops(reduce) and re.search(r"reducer\(|stablehlo\.add", reduce), reduce
    scaled = _ops(_stablehlo(lambda x: x * 3.0, (3,)))
    assert scaled == ["func.func public", "stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.multiply"]


def test_a_causal_mask_is_two_iotas_and_a_compare_and_where_a_call():
    text = _stablehlo(lambda s: jnp.where(jnp.arange(4)[:, None] >= jnp.arange(6)[None, :], s, -jnp.inf), (4, 6))
    main, where = text.split("func.func private")
    assert _ops(main).count("stablehlo.iota") == 2 and "stablehlo.compare" in _ops(main), text
    assert "call @_where" in _ops(main) and "stablehlo.select" not in main
    assert where.lstrip().startswith("@_where") and "stablehlo.select" in _ops(where), text


def test_a_nested_jit_is_a_private_function_reached_by_call():
    inner = jax.jit(lambda x: jnp.tanh(x) * 2)
    ops = _ops(_stablehlo(lambda x: inner(x) + inner(x * 3), (3,)))
    assert ops.count("func.func private") == 1 and ops.count('call @"<lambda>"') == 2, ops


def test_lowering_optimises_nothing_and_compiling_does():
    def useless(x):
        return x * 1.0 + 0.0

    lowered = _ops(_stablehlo(useless, (8,)))
    assert "stablehlo.multiply" in lowered and "stablehlo.add" in lowered, lowered
    compiled = {i.opcode for i in cpu_hlo(useless, jax.ShapeDtypeStruct((8,), jnp.float32)).instructions()}
    assert not {"multiply", "add"} & compiled, compiled


def test_how_dot_general_prints_its_dimension_numbers():
    matmul = _stablehlo(jnp.matmul, (3, 4), (4, 5))
    assert "contracting_dims = [1] x [0]" in matmul and "batching_dims" not in matmul
    outer = _stablehlo(lambda a, b: jnp.einsum("i,j->ij", a, b), (3,), (4,))
    assert "contracting_dims = [] x []" in outer and "batching_dims" not in outer
    jnp_outer = _ops(_stablehlo(jnp.outer, (3,), (4,)))
    assert "stablehlo.dot_general" not in jnp_outer and "stablehlo.multiply" in jnp_outer
    vector_dot = _stablehlo(jnp.dot, (5,), (5,))
    assert re.search(r"dot_general.*-> tensor<f32>", vector_dot), vector_dot


def test_dot_general_lays_out_batch_then_lhs_free_then_rhs_free():
    numbers = (((2, 3), (2, 0)), ((0,), (1,)))  # the README's worked example
    lhs = np.random.default_rng(0).normal(size=(2, 3, 4, 6)).astype(np.float32)
    rhs = np.random.default_rng(1).normal(size=(6, 2, 4, 5)).astype(np.float32)
    out = lax.dot_general(lhs, rhs, numbers, precision=lax.Precision.HIGHEST)
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(out, np.einsum("abcd,dace->abe", lhs, rhs), rtol=1e-5, atol=1e-5)


def test_precision_and_algorithm_as_stablehlo_prints_them():
    def dot_line(precision):
        text = _stablehlo(lambda a, b: jnp.dot(a, b, precision=precision), (8, 8), (8, 8))
        return next(line for line in text.splitlines() if "dot_general" in line)

    assert "precision = [DEFAULT, DEFAULT]" in dot_line(None) and "algorithm" not in dot_line(None)
    assert "precision = [HIGHEST, HIGHEST]" in dot_line(lax.Precision.HIGHEST)
    for preset, operand in ((lax.DotAlgorithmPreset.BF16_BF16_F32, "bf16"), (lax.DotAlgorithmPreset.F32_F32_F32, "f32")):
        assert (f"algorithm = <lhs_precision_type = {operand}, rhs_precision_type = {operand}, "
                f"accumulation_type = f32") in dot_line(preset), dot_line(preset)


def test_the_course_floors_name_no_precision():
    """One contract (references.py): every floor runs at the precision in effect, as the kernels do."""
    assert "precision = [DEFAULT, DEFAULT]" in _stablehlo(references.matmul_floor, (8, 8), (8, 8))
    attention = _stablehlo(references.attention_floor, (1, 1, 8, 8), (1, 1, 8, 8), (1, 1, 8, 8))
    assert attention.count("precision = [DEFAULT, DEFAULT]") == 2, attention
    with jax.default_matmul_precision("highest"):  # what a run on a TPU judges graded values under
        attention = _stablehlo(references.attention_floor, (1, 1, 8, 8), (1, 1, 8, 8), (1, 1, 8, 8))
    assert attention.count("precision = [HIGHEST, HIGHEST]") == 2, attention


def test_on_xla_cpu_an_f32_dot_at_default_is_computed_in_f32():
    a, b = (np.random.default_rng(seed).normal(size=(256, 256)).astype(np.float32) for seed in (0, 1))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error = np.linalg.norm(np.asarray(jnp.dot(a, b)) - exact) / np.linalg.norm(exact)
    rounded = a.astype(jnp.bfloat16).astype(np.float64) @ b.astype(jnp.bfloat16).astype(np.float64)
    assert error < 1e-6 < np.linalg.norm(rounded - exact) / np.linalg.norm(exact) / 100, (error, versions())


def _convolution(precision):
    """The v5e's dot instruction for an f32 (256, 256) @ (256, 256) at this precision, without metadata."""
    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    module = v5e_hlo(lambda a, b: jnp.dot(a, b, precision=precision), x, x)
    [conv] = [i for i in module.instructions() if i.opcode == "convolution"]
    return re.sub(r",?\s*metadata=\{[^}]*\}", "", conv.attributes)


def test_on_a_v5e_an_f32_dot_at_default_is_the_bf16_algorithm():
    default = _convolution(None)
    assert default == _convolution(lax.DotAlgorithmPreset.BF16_BF16_F32), versions()
    assert "operand_precision" not in default
    assert "operand_precision={highest,highest}" in _convolution(lax.Precision.HIGHEST), versions()


def _pallas_dot(x, y, *, precision):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=precision, preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32))(x, y)


def test_on_a_v5e_a_pallas_f32_dot_makes_one_mxu_pass_at_default_and_six_at_highest():
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    default = v5e_kernel(functools.partial(_pallas_dot, precision=None), x, x).mxu_ops
    highest = v5e_kernel(functools.partial(_pallas_dot, precision=lax.Precision.HIGHEST), x, x).mxu_ops
    assert (default, highest) == (16, 96), versions()
    with jax.default_matmul_precision("highest"):  # the setting reaches inside a kernel's dot too
        configured = v5e_kernel(functools.partial(_pallas_dot, precision=None), x, x).mxu_ops
    assert configured == highest, versions()
