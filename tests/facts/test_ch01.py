"""Chapter 1's claims about JAX, XLA and JAX's TPU kernels, read off the installed toolchain.

docs/facts.md lists each claim with the README line it backs.
"""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

from pytest_tpucourse.readers import mosaic

from .reading import cpu_hlo, kernels, versions


def _sum_of_equations(jaxpr, counts):
    """Primitive counts of a jaxpr, its sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] += 1
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                _sum_of_equations(inner, counts)
    return counts


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_exp_overflows_above_88_7_in_f32_and_bf16(dtype):
    assert np.log(float(jnp.finfo(dtype).max)) == pytest.approx(88.7, abs=0.05)
    assert np.isfinite(float(jnp.exp(jnp.asarray(88.5, dtype))))
    assert np.isinf(float(jnp.exp(jnp.asarray(89.0, dtype))))


def test_exp_of_minus_inf_is_zero_and_inf_minus_inf_is_nan():
    assert float(jnp.exp(jnp.float32(-jnp.inf))) == 0.0
    assert np.isnan(float(jnp.float32(-jnp.inf) - jnp.float32(-jnp.inf)))


def test_an_unguarded_zero_sum_divides_to_nan():
    """A flash kernel that skipped every block of a row divides an accumulator of 0 by l = 0."""
    assert np.isnan(np.asarray(jnp.zeros(4) / jnp.float32(0.0))).all()


def test_jax_nn_softmax_of_a_fully_masked_row_is_nan():
    assert np.isnan(np.asarray(jax.nn.softmax(jnp.full((4,), -jnp.inf)))).all(), versions()


def test_jax_tpu_flash_attention_gives_the_mean_of_v_to_a_fully_masked_row():
    """Query 0's segment matches no key: the kernel's finite mask value gives it equal weights."""
    assert fa.DEFAULT_MASK_VALUE == -0.7 * float(jnp.finfo(jnp.float32).max)
    shape = (1, 1, 128, 128)
    q, k, v = (jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32) for seed in range(3))
    q_segments = jnp.ones((1, 128), jnp.int32).at[0, 0].set(2)
    sizes = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    with pltpu.force_tpu_interpret_mode():
        out = np.asarray(fa.flash_attention(q, k, v, segment_ids=fa.SegmentIds(q_segments, jnp.ones((1, 128), jnp.int32)),
                                            block_sizes=sizes))
    np.testing.assert_allclose(out[0, 0, 0], np.asarray(v)[0, 0].mean(axis=0), rtol=1e-5, atol=1e-6,
                               err_msg=versions())


def test_bf16_spacing_at_one_is_2_to_the_minus_7_and_its_rounding_error_at_most_2_to_the_minus_8():
    info = jnp.finfo(jnp.bfloat16)
    assert (info.nmant, float(info.eps)) == (7, 2.0 ** -7)
    assert float(jnp.asarray(1 + 2.0 ** -8, jnp.bfloat16)) == 1.0  # a tie, to even
    assert float(jnp.asarray(1 + 2.0 ** -8 + 2.0 ** -12, jnp.bfloat16)) == 1 + 2.0 ** -7


def test_a_bf16_running_sum_of_4096_ones_stops_at_256():
    ones = jnp.ones(4096, jnp.bfloat16)
    total = jax.lax.fori_loop(0, 4096, lambda i, s: s + ones[i], jnp.bfloat16(0))
    assert float(total) == 256.0


def test_einsum_with_preferred_element_type_f32_accumulates_bf16_inputs_in_f32():
    ones = jnp.ones(4096, jnp.bfloat16)
    contract = lambda a, b: jnp.einsum("i,i->", a, b, preferred_element_type=jnp.float32)  # noqa: E731
    [eqn] = jax.make_jaxpr(contract)(ones, ones).jaxpr.eqns
    assert eqn.primitive.name == "dot_general" and eqn.params["preferred_element_type"] == jnp.float32
    assert float(contract(ones, ones)) == 4096.0


def test_repeated_kv_heads_are_a_copy_and_grouped_queries_are_not():
    """XLA:CPU: jnp.repeat writes k H/Hkv times over before the dot; the grouped einsum
    writes nothing of k's size times the group."""
    b, h, hkv, s, d = 1, 8, 2, 256, 64
    q = jax.ShapeDtypeStruct((b, h, s, d), jnp.float32)
    k = jax.ShapeDtypeStruct((b, hkv, s, d), jnp.float32)

    def repeated(q, k):
        return jnp.einsum("bhqd,bhkd->bhqk", q, jnp.repeat(k, h // hkv, axis=1))

    def grouped(q, k):
        return jnp.einsum("bkgqd,bksd->bkgqs", q.reshape(b, hkv, h // hkv, s, d), k)

    def k_sized_writes(fn):
        return [dims for i in kernels(cpu_hlo(fn, q, k))
                for _, dims in i.arrays if int(np.prod(dims)) in (h * s * d, hkv * s * d)]

    assert [int(np.prod(dims)) for dims in k_sized_writes(repeated)] == [h * s * d], versions()
    assert [int(np.prod(dims)) for dims in k_sized_writes(grouped)] == [hkv * s * d], versions()


def test_tile_maps_head_h_to_kv_head_h_mod_hkv():
    heads = jnp.arange(2.0).reshape(1, 2, 1, 1)
    assert jnp.tile(heads, (1, 2, 1, 1)).ravel().tolist() == [0, 1, 0, 1]
    assert jnp.repeat(heads, 2, axis=1).ravel().tolist() == [0, 0, 1, 1]


def test_jax_tpu_flash_kernel_rounds_probabilities_to_v_dtype_before_p_v():
    """Lowered for a TPU (no compiler): the f32 probabilities are truncated to bf16 and fed to
    the second matmul."""
    x = jax.ShapeDtypeStruct((1, 1, 128, 128), jnp.bfloat16)
    sizes = fa.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1)
    [kernel] = mosaic.kernels(lambda q, k, v: fa.flash_attention(q, k, v, block_sizes=sizes), x, x, x)
    matmuls = [line for line in kernel.text.splitlines() if "tpu.matmul" in line]
    assert len(matmuls) == 2, kernel.text
    truncated = [line.split("=")[0].strip() for line in kernel.text.splitlines()
                 if "arith.truncf" in line and "f32> to vector<128x128xbf16>" in line]
    assert any(f"tpu.matmul {name}," in matmuls[1] for name in truncated), matmuls[1]


def test_where_differentiates_the_branch_it_discards():
    assert np.isnan(float(jax.grad(lambda x: jnp.where(x > 0, jnp.log(x), 0.0))(0.0)))


def test_the_max_over_an_all_minus_inf_slice_has_a_finite_gradient():
    grad = jax.grad(lambda x: jnp.max(x))(jnp.full((2,), -jnp.inf))
    assert grad.tolist() == [0.5, 0.5], versions()


def _softmax(x, *, guard: bool, stop: bool):
    m = jnp.max(x, axis=-1, keepdims=True)
    if guard:
        m = jnp.where(jnp.isfinite(m), m, 0.0)
    if stop:
        m = jax.lax.stop_gradient(m)
    e = jnp.exp(x - m)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total == 0, 1.0, total)


def test_a_fully_masked_rows_nan_comes_from_the_shift_and_the_guard_removes_it():
    row = jnp.full((1, 4), -jnp.inf)
    cotangent = jnp.arange(4.0).reshape(1, 4)
    unguarded, vjp = jax.vjp(lambda x: _softmax(x, guard=False, stop=False), row)
    assert np.isnan(np.asarray(unguarded)).all() and np.isnan(np.asarray(vjp(cotangent)[0])).all()
    guarded, vjp = jax.vjp(lambda x: _softmax(x, guard=True, stop=False), row)
    assert np.asarray(guarded).tolist() == [[0.0] * 4]
    assert np.isfinite(np.asarray(vjp(cotangent)[0])).all(), "the guard alone, without stop_gradient"


def test_stop_gradient_on_the_shift_drops_the_maxs_vjp_from_the_backward_pass():
    x = jnp.ones((4, 8))
    counts = {}
    for stop in (False, True):
        _, vjp = jax.vjp(lambda x: _softmax(x, guard=True, stop=stop), x)
        counts[stop] = _sum_of_equations(jax.make_jaxpr(vjp)(x).jaxpr, Counter())
    assert (counts[False]["reduce_sum"], counts[True]["reduce_sum"]) == (4, 2), counts
    assert sum(counts[True].values()) * 1.5 < sum(counts[False].values()), counts


def test_stop_gradient_on_layer_norms_mean_keeps_values_and_changes_grads():
    def layer_norm(x, stop):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        if stop:
            mean = jax.lax.stop_gradient(mean)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5)

    x = jax.random.normal(jax.random.key(0), (4, 96)) * 2 + 3
    g = jax.random.normal(jax.random.key(1), (4, 96))
    assert bool(jnp.all(layer_norm(x, True) == layer_norm(x, False)))
    right = jax.vjp(lambda x: layer_norm(x, False), x)[1](g)[0]
    wrong = jax.vjp(lambda x: layer_norm(x, True), x)[1](g)[0]
    assert float(jnp.linalg.norm(wrong - right) / jnp.linalg.norm(right)) > 0.1
