"""Graded tests for ch01.attention: attention(q, k, v, mask=None, *, causal, scale)."""

import jax.numpy as jnp
import numpy as np
from hypothesis import example, given

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

# Few shapes (each one compiles every op again): multi-query (4 heads share 1 kv
# head); grouped-query (4 heads, 2 kv heads); grouped-query and causal with more keys
# than queries (top-left alignment: query i sees keys 0..i, not the last i + 1 keys).
MQA = tst.AttentionConfig(batch=1, heads=4, kv_heads=1, q_len=64, kv_len=64, head_dim=32,
                          causal=False, dtype="float32")
GQA = tst.AttentionConfig(batch=1, heads=4, kv_heads=2, q_len=64, kv_len=64, head_dim=32,
                          causal=True, dtype="bfloat16")
CAUSAL_WIDE = tst.AttentionConfig(batch=2, heads=4, kv_heads=2, q_len=32, kv_len=96, head_dim=32,
                                  causal=True, dtype="float32")


CONFIGS = tst.attention_configs(MQA, GQA, CAUSAL_WIDE)  # causal or not, f32 or bf16


def _mask(cfg, seed):
    """(B, 1, Sq, Skv): about 30% of keys hidden per query, and query 0 sees nothing."""
    rng = np.random.default_rng(seed)
    mask = rng.random((cfg.batch, 1, cfg.q_len, cfg.kv_len)) < 0.7
    mask[:, :, 0, :] = False
    return jnp.asarray(mask)


# Every shape, causal and not, both dtypes and an explicit scale beside the default are explicit
# examples: the dev profile draws only what they hold.
@given(cfg=CONFIGS, scale=tst.few(None, 0.3), seed=tst.seeds())
@example(cfg=MQA, scale=None, seed=0)
@example(cfg=CAUSAL_WIDE, scale=None, seed=0)
@example(cfg=GQA, scale=0.3, seed=1)
def test_attention_matches_reference(impl, cfg, scale, seed):
    q, k, v = cfg.arrays(seed)
    checks.assert_matches_reference(
        impl.attention.attention, (q, k, v), kwargs=dict(causal=cfg.causal, scale=scale),
        reference=references.ATTENTION.bind(causal=cfg.causal, scale=scale), require_kernel=False)


@given(cfg=CONFIGS, seed=tst.seeds())
@example(cfg=CAUSAL_WIDE, seed=0)
@example(cfg=MQA, seed=1)
@example(cfg=GQA, seed=2)
def test_attention_with_mask(impl, cfg, seed):
    """A boolean mask, broadcast over heads; query 0 is fully masked and must come out zero."""
    q, k, v = cfg.arrays(seed)
    mask = _mask(cfg, seed)
    checks.assert_matches_reference(
        impl.attention.attention, (q, k, v, mask), kwargs=dict(causal=cfg.causal),
        reference=references.ATTENTION.bind(causal=cfg.causal), require_kernel=False)


def test_attention_grads(impl):
    """dq, dk, dv with 2 query heads per kv head (dk and dv sum over the group), causal."""
    cfg = CAUSAL_WIDE
    q, k, v = cfg.arrays(7)
    checks.assert_grads_match(
        impl.attention.attention, (q, k, v), kwargs=dict(causal=cfg.causal),
        reference=references.ATTENTION.bind(causal=cfg.causal), argnames=("dq", "dk", "dv"),
        seed=7)


def test_attention_grads_with_mask(impl):
    cfg = CAUSAL_WIDE
    q, k, v = cfg.arrays(3)
    mask = _mask(cfg, 3)  # a keyword argument: it has no gradient
    checks.assert_grads_match(
        impl.attention.attention, (q, k, v), kwargs=dict(mask=mask, causal=True),
        reference=references.ATTENTION.bind(mask=mask, causal=True),
        argnames=("dq", "dk", "dv"), seed=3)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a drawn configuration and scale, one
    with a mask, and the grads of grouped heads, on values the tree has never seen."""
    import dataclasses

    base = (MQA, GQA, CAUSAL_WIDE)[int(rng.integers(3))]
    cfg = dataclasses.replace(base, causal=bool(rng.integers(2)), dtype=str(rng.choice(tst.DTYPES)))
    scale = (None, 0.3)[int(rng.integers(2))]
    cases = [checks.trusted.values("attention", cfg.arrays(checks.trusted.seed(rng)),
                                   kwargs=dict(causal=cfg.causal, scale=scale),
                                   reference=references.ATTENTION.bind(causal=cfg.causal, scale=scale),
                                   label=f"attention({cfg}, scale={scale})")]
    seed = checks.trusted.seed(rng)
    mask = _mask(CAUSAL_WIDE, seed)
    cases.append(checks.trusted.values("attention", (*CAUSAL_WIDE.arrays(seed), mask), kwargs=dict(causal=True),
                                       reference=references.ATTENTION.bind(causal=True),
                                       label=f"attention({CAUSAL_WIDE}, with a mask)"))
    cases.append(checks.trusted.grads("attention", CAUSAL_WIDE.arrays(checks.trusted.seed(rng)),
                                      kwargs=dict(causal=True), argnames=("dq", "dk", "dv"),
                                      reference=references.ATTENTION.bind(causal=True),
                                      cotangent_seed=checks.trusted.seed(rng),
                                      label=f"grads of attention({CAUSAL_WIDE})"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
