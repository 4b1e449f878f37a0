"""Graded tests for ch13.backward: flash_attention(q, k, v, *, causal, scale, block_q, block_kv),
differentiable through a jax.custom_vjp whose backward is Pallas kernels."""

import dataclasses

import jax
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, references, structure, tpu_checks
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.outcomes import WrongResult

BLOCKS = dict(block_q=128, block_kv=128)
SQUARE = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=64,
                             causal=True, dtype="bfloat16")  # 4 x 4 blocks
WIDE = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=512, head_dim=128,
                           causal=True, dtype="float32")  # q_len < kv_len: causal keys 256.. get no grad
TALL = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=512, kv_len=256, head_dim=64,
                           causal=True, dtype="float32")  # q_len > kv_len


def _gradient(impl, **kwargs):
    """(dq, dk, dv) of sum(flash_attention(q, k, v, **kwargs)), graded as flash_attention."""
    fn = impl.backward.flash_attention
    return fn.derived(
        lambda function: jax.grad(lambda *a: function(*a, **kwargs).astype("float32").sum(),
                                  argnums=(0, 1, 2)),
        f"the gradient of {fn.display}")


def check_grads(impl, cfg, seed, *, scale=None, check_custom_vjp=False):
    q, k, v = cfg.arrays(seed)
    kwargs = dict(causal=cfg.causal, scale=scale, **BLOCKS)
    checks.assert_grads_match(
        impl.backward.flash_attention, (q, k, v), kwargs=kwargs,
        reference=references.ATTENTION.bind(causal=cfg.causal, scale=scale),
        argnames=("dq", "dk", "dv"), seed=seed, check_custom_vjp=check_custom_vjp)


@given(cfg=tst.few(SQUARE, WIDE, TALL), causal=st.booleans(), dtype=tst.dtypes(),
       scale=tst.few(None, 0.3), seed=tst.seeds())
@example(cfg=SQUARE, causal=True, dtype="bfloat16", scale=None, seed=0)
# and WIDE, non-causal, f32, scale 0.3 at seed 0: the race test
def test_grads_match_reference(impl, cfg, causal, dtype, scale, seed):
    """dq, dk and dv each against the float64 oracle's VJP, bf16 and f32, causal or not."""
    check_grads(impl, dataclasses.replace(cfg, causal=causal, dtype=dtype), seed, scale=scale)


@pytest.mark.parametrize("cfg", [WIDE, TALL], ids=["q_len<kv_len", "q_len>kv_len"])
def test_grads_agree_with_own_forward(impl, cfg):
    """The custom_vjp's backward against numerical differentiation of its own forward
    (jax.test_util.check_grads, float32), on top of the oracle comparison."""
    check_grads(impl, cfg, 5, check_custom_vjp=True)


def test_forward_value_through_custom_vjp(impl):
    q, k, v = SQUARE.arrays(6)
    checks.assert_matches_reference(
        impl.backward.flash_attention, (q, k, v), kwargs=dict(causal=True, **BLOCKS),
        reference=references.ATTENTION.bind(causal=True))


def test_backward_is_pallas_kernels(impl):
    """The VJP runs Pallas kernels of its own (a dq and a dk/dv kernel), not XLA's autodiff
    of the forward: a custom_vjp, and more pallas_calls in the VJP than in the forward."""
    fn = impl.backward.flash_attention
    q, k, v = SQUARE.arrays(7)
    kwargs = dict(causal=True, **BLOCKS)
    forward = fn.jaxpr(q, k, v, **kwargs)
    if not structure.defines_custom_vjp(forward):
        raise WrongResult(f"{fn.display} defines no jax.custom_vjp: its gradient would be JAX's "
                          f"autodiff of the forward kernel (a gridded pallas_call with scratch "
                          f"is not differentiable), not the flash backward.")
    function = fn.resolve()
    vjp = jax.make_jaxpr(lambda q, k, v, do: jax.vjp(
        lambda *a: function(*a, **kwargs), q, k, v)[1](do))(q, k, v, q)
    extra = structure.count_pallas_calls(vjp) - structure.count_pallas_calls(forward)
    if extra < 1:
        raise WrongResult(f"{fn.display}: its VJP runs no pallas_call beyond the forward's; the "
                          f"backward must be Pallas kernels (dq; dk and dv).")


def test_backward_has_no_race_on_two_cores(impl):
    """The dq kernel's kv axis and the dk/dv kernel's q axis carry sums: neither may be split.
    The same call's dq, dk and dv are checked too."""
    fn = impl.backward.flash_attention
    with tpu_checks.checking_races(fn.derived(lambda function: function, f"the VJP of {fn.display}")):
        check_grads(impl, dataclasses.replace(WIDE, causal=False), 0, scale=0.3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_lowers_for_tpu(impl, dtype):
    """The backward kernels at the default blocks (128) compile for a TPU."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu_checks.assert_lowers_for_tpu(_gradient(impl, causal=True), q, k, v)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the backward kernels at the
    default blocks."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu_checks.assert_compiles_for(_gradient(impl, causal=True), q, k, v)
