"""Graded tests for ch13.backward: flash_attention(q, k, v, *, causal, scale, block_q, block_kv),
differentiable through a jax.custom_vjp whose backward is Pallas kernels."""

import dataclasses

import jax
import pytest
from hypothesis import example, given

from pytest_tpucourse import ir, checks, references, tpu
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.checks import WrongResult

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

BLOCKS = dict(block_q=128, block_kv=128)
Q_TWICE_KV, KV_TWICE_Q = tst.unequal_blocks(("block_q", "block_kv"), (256, 128))
SQUARE = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=64,
                             causal=True, dtype="bfloat16")  # 4 x 4 blocks
WIDE = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=512, head_dim=128,
                           causal=True, dtype="float32")  # q_len < kv_len: causal keys 256.. get no grad
TALL = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=512, kv_len=256, head_dim=64,
                           causal=True, dtype="float32")  # q_len > kv_len


def _gradient(impl, **kwargs):
    """(dq, dk, dv) of sum(flash_attention(q, k, v, **kwargs)), graded as flash_attention."""
    return checks.gradient(impl.backward.flash_attention, **kwargs)


def check_grads(impl, cfg, seed, *, scale=None, blocks=BLOCKS, check_custom_vjp=False):
    q, k, v = cfg.arrays(seed)
    kwargs = dict(causal=cfg.causal, scale=scale, **blocks)
    checks.assert_grads_match(
        impl.backward.flash_attention, (q, k, v), kwargs=kwargs,
        reference=references.ATTENTION.bind(causal=cfg.causal, scale=scale),
        argnames=("dq", "dk", "dv"), seed=seed, check_custom_vjp=check_custom_vjp,
        note=f"q, k, v = AttentionConfig({cfg}).arrays({seed})")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_lowers_for_tpu(impl, dtype):
    """The backward kernels at the default blocks (clamped to the 512 length) lower for a TPU."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu.assert_lowers_for_tpu(_gradient(impl, causal=True), q, k, v, compile_ahead=True)


# Unequal block sets run as explicit cases, so every profile grades them: here (128, 256),
# and causal in the poisoned case (256, 128) and the long sequence (128, 512). Drawn
# examples take any set (each drawn configuration compiles three kernels of its own anyway).
@given(cfg=tst.few(SQUARE, WIDE, TALL), causal=tst.booleans(), dtype=tst.dtypes(),
       scale=tst.few(None, 0.3), blocks=tst.few(BLOCKS, Q_TWICE_KV, KV_TWICE_Q), seed=tst.seeds())
@example(cfg=SQUARE, causal=True, dtype="bfloat16", scale=None, blocks=BLOCKS, seed=0)
@example(cfg=WIDE, causal=False, dtype="float32", scale=0.3, blocks=KV_TWICE_Q, seed=0)
@example(cfg=TALL, causal=True, dtype="float32", scale=None, blocks=BLOCKS, seed=1)
@example(cfg=SQUARE, causal=False, dtype="bfloat16", scale=0.3, blocks=Q_TWICE_KV, seed=2)
def test_grads_match_reference(impl, cfg, causal, dtype, scale, blocks, seed):
    """dq, dk and dv each against the float64 oracle's VJP, bf16 and f32, causal or not."""
    check_grads(impl, dataclasses.replace(cfg, causal=causal, dtype=dtype), seed, scale=scale,
                blocks=blocks)


def test_grads_hold_over_a_long_sequence(impl):
    """2048 causal bf16 positions in q blocks of 128: dk and dv each sum 16 q blocks. An
    accumulator kept in bf16 rounds after every one, and its error grows with the count:
    docs/checking.md measures it against the bound from 256 to 4096 positions (it passes
    up to 512 and fails from 1024 on). kv blocks of 512 keep the grid at 192 steps."""
    cfg = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=2048, kv_len=2048, head_dim=64,
                              causal=True, dtype="bfloat16")
    check_grads(impl, cfg, 0, blocks=dict(block_q=128, block_kv=512))


def test_grads_agree_with_own_forward(impl):
    """The custom_vjp's backward against numerical differentiation of its own forward
    (jax.test_util.check_grads, float32), on top of the oracle comparison, with keys no
    causal query sees (q_len < kv_len)."""
    check_grads(impl, WIDE, 5, check_custom_vjp=True)


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
    if not ir.defines_custom_vjp(forward):
        raise WrongResult(f"{fn.display} defines no jax.custom_vjp: its gradient would be JAX's "
                          f"autodiff of the forward kernel (JAX has no reverse-mode rule for a "
                          f"pallas_call: jax.grad through one fails), not the flash backward.")
    function = fn.resolve()
    vjp = jax.make_jaxpr(lambda q, k, v, do: jax.vjp(
        lambda *a: function(*a, **kwargs), q, k, v)[1](do))(q, k, v, q)
    extra = ir.count_pallas_calls(vjp) - ir.count_pallas_calls(forward)
    if extra < 1:
        raise WrongResult(f"{fn.display}: its VJP runs no pallas_call beyond the forward's; the "
                          f"backward must be Pallas kernels (dq; dk and dv).")


def test_backward_has_no_race_on_two_cores(impl):
    """The dq kernel's kv axis and the dk/dv kernel's q axis carry sums: neither may be split.
    The gradient runs the forward and both backward kernels; one batch, one head and 3 blocks
    of each length make the parallel extents before each summed axis multiply to an odd
    number, so the cores' split falls inside one block's walk. (test_gqa.py does the same
    with grouped heads.) The same call's dq, dk and dv are checked too."""
    fn = impl.backward.flash_attention
    cfg = dataclasses.replace(WIDE, q_len=384, kv_len=384, head_dim=64, causal=False)
    with tpu.checking_races(fn.derived(lambda function: function, f"the VJP of {fn.display}")):
        check_grads(impl, cfg, 8)


# The causal backward skips like the forward: q_len < kv_len (keys 512.. seen by no query)
# and q_len > kv_len, never square (the fetch log tells q-shaped operands from k-shaped
# ones by their lengths); head_dim 64.
SKIPPING = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=512, kv_len=1024, head_dim=64,
                               causal=True, dtype="float32")


@pytest.mark.parametrize("blocks", [BLOCKS, KV_TWICE_Q], ids=["128-128", "128-256"])
@pytest.mark.parametrize("cfg", [SKIPPING, dataclasses.replace(SKIPPING, q_len=768, kv_len=512)],
                         ids=["q_len<kv_len", "q_len>kv_len"])
def test_causal_backward_never_fetches_blocks_above_the_diagonal(impl, cfg, blocks):
    """Over the gradient's kernels (forward, dq, dk/dv): no block of q, dO, k or v copied for
    a (q block, kv block) pair the mask empties. The dq kernel walks kv blocks like the
    forward; the dk/dv kernel walks q blocks, which must start at the first q block that
    sees its kv block."""
    q, k, v = cfg.arrays(0)
    ir.assert_causal_attention_skips_fetches(
        _gradient(impl, causal=True, **blocks), (q, k, v),
        note=str(cfg))


def test_causal_backward_never_computes_blocks_above_the_diagonal(impl):
    q, k, v = SKIPPING.arrays(1)
    ir.assert_compute_is_conditional(
        _gradient(impl, causal=True, **BLOCKS), (q, k, v),
        why="Both backward kernels skip the block pairs the mask empties, as the forward does.",
        note=str(SKIPPING))


def test_causal_backward_ignores_poisoned_blocks_above_the_diagonal(impl):
    """Keys 512..1023 are NaN and seen by no query: dq must not read them, and their dk and
    dv must come out 0 without the dk/dv kernel computing on them. Blocks (256, 128): a
    causal backward whose first needed q block is computed with the two sizes swapped skips
    blocks it needs here."""
    q, k, v = ir.poison_unseen_keys(*SKIPPING.arrays(2))
    reference = ir.seen_keys_reference(references.ATTENTION, SKIPPING.q_len)
    checks.assert_grads_match(
        impl.backward.flash_attention, (q, k, v), kwargs=dict(causal=True, **Q_TWICE_KV),
        reference=reference.bind(causal=True), argnames=("dq", "dk", "dv"), seed=2,
        check_custom_vjp=False,
        note=f"k and v are NaN from key {SKIPPING.q_len} on, where no causal query looks: {SKIPPING}")


def test_backward_never_materialises_the_scores(impl):
    """Nothing outside the kernels, forward or backward, as large as one head's (Sq, Skv)
    probabilities: every array the VJP legitimately holds (q, k, v, out, dO, lse, Δ and
    the grads) is smaller at this shape."""
    q, k, v = SKIPPING.arrays(3)
    ir.assert_no_value_as_large_as(
        _gradient(impl, causal=True, **BLOCKS), (q, k, v),
        elements=SKIPPING.q_len * SKIPPING.kv_len,
        what=f"one head's ({SKIPPING.q_len}, {SKIPPING.kv_len}) score or probability matrix",
        why="The backward recomputes P block by block inside its kernels, from the saved "
            "logsumexp.",
        note=str(SKIPPING))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the backward kernels at the
    default blocks."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu.assert_compiles_for(_gradient(impl, causal=True), q, k, v)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): dq, dk and dv of a configuration and
    block set the grader draws (that they are Pallas kernels, skip blocks and never hold the
    scores is the tree's own process's to see)."""
    base = (SQUARE, WIDE, TALL)[int(rng.integers(3))]
    cfg = dataclasses.replace(base, causal=bool(rng.integers(2)), dtype=str(rng.choice(tst.DTYPES)))
    scale, blocks = (None, 0.3)[int(rng.integers(2))], (BLOCKS, Q_TWICE_KV, KV_TWICE_Q)[int(rng.integers(3))]
    return [checks.trusted.grads("flash_attention", cfg.arrays(checks.trusted.seed(rng)),
                                 kwargs=dict(causal=cfg.causal, scale=scale, **blocks), argnames=("dq", "dk", "dv"),
                                 reference=references.ATTENTION.bind(causal=cfg.causal, scale=scale),
                                 cotangent_seed=checks.trusted.seed(rng),
                                 label=f"grads of flash_attention({cfg}, scale={scale}, {blocks})")]


TRUSTED = checks.trusted.Cases(_trusted_cases)
