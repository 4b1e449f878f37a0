"""Graded tests for ch05.streaming: streaming_attention(...) and streaming_states(...)."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

# Few shapes (each compiles a scan): multi-head 128 x 128; grouped-query (4 heads,
# 2 kv heads) 256 x 256; more keys than queries (64 queries, 256 keys).
MHA = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=128, kv_len=128, head_dim=64,
                          causal=False, dtype="float32")
GQA = tst.AttentionConfig(batch=2, heads=4, kv_heads=2, q_len=256, kv_len=256, head_dim=32,
                          causal=True, dtype="bfloat16")
WIDE = tst.AttentionConfig(batch=1, heads=2, kv_heads=1, q_len=64, kv_len=256, head_dim=64,
                           causal=True, dtype="float32")
BLOCKS = (16, 32, 64, 128)  # every one divides every kv_len above


@given(cfg=tst.attention_configs(MHA, GQA, WIDE), block_k=tst.few(*BLOCKS), seed=tst.seeds())
@example(cfg=MHA, block_k=128, seed=0)                                          # one block: no rescaling
@example(cfg=dataclasses.replace(GQA, dtype="float32"), block_k=16, seed=0)     # 16 steps, causal
@example(cfg=WIDE, block_k=32, seed=0)                                          # Skv > Sq, causal
@example(cfg=GQA, block_k=64, seed=1)                                           # bf16, causal
def test_streaming_attention_matches_reference(impl, cfg, block_k, seed):
    q, k, v = cfg.arrays(seed)
    checks.assert_matches_reference(
        impl.streaming.streaming_attention, (q, k, v), kwargs=dict(causal=cfg.causal, block_k=block_k),
        reference=references.ATTENTION.bind(causal=cfg.causal), require_kernel=False)


def test_streaming_attention_custom_scale(impl):
    q, k, v = MHA.arrays(5)
    checks.assert_matches_reference(
        impl.streaming.streaming_attention, (q, k, v), kwargs=dict(scale=0.3, block_k=32),
        reference=references.ATTENTION.bind(scale=0.3), require_kernel=False)


# Key lengths around a block of 32 (WIDE's 64 queries, causal): below it (16), equal (32), above
# (the explicit example's 256, eight blocks, already compiled) and ragged (two blocks and 16 keys,
# 80). The block must divide the key length: a length it does not divide is refused, never walked
# short of its last keys.
KEY_BLOCK = 32
KEY_LENGTHS = {**tst.dims_around(KEY_BLOCK, tile=16), "above": WIDE.kv_len}


def _around_the_block(dim):
    cfg = dataclasses.replace(WIDE, kv_len=KEY_LENGTHS[dim])
    return cfg, cfg.arrays(6)


def _assert_refused(fn, cfg, qkv):
    checks.assert_rejects(fn, qkv, kwargs=dict(causal=cfg.causal, block_k=KEY_BLOCK), error=ValueError,
                          mentions=(str(cfg.kv_len), str(KEY_BLOCK)),
                          note=f"{cfg.kv_len} keys in blocks of {KEY_BLOCK}: the block does not divide the key length")


@pytest.mark.parametrize("dim", tst.DIM_KINDS)
def test_streaming_attention_key_lengths_around_the_block(impl, dim):
    cfg, qkv = _around_the_block(dim)
    fn = impl.streaming.streaming_attention
    if cfg.kv_len % KEY_BLOCK:
        _assert_refused(fn, cfg, qkv)
    else:
        checks.assert_matches_reference(fn, qkv, kwargs=dict(causal=cfg.causal, block_k=KEY_BLOCK),
                                        reference=references.ATTENTION.bind(causal=cfg.causal), require_kernel=False)


@pytest.mark.parametrize("dim", ["below", "ragged"])
def test_streaming_states_refuses_key_lengths_the_block_does_not_divide(impl, dim):
    """(Lengths the block divides: the invariant test below.)"""
    cfg, qkv = _around_the_block(dim)
    _assert_refused(impl.streaming.streaming_states, cfg, qkv)


def _prefix_max(q, k, end, causal, scale):
    """max over keys [0, end) of the scaled (and causally masked) scores, in float64."""
    q64, k64 = tst.as_float64(q), tst.as_float64(k)
    k64 = np.repeat(k64, q.shape[1] // k.shape[1], axis=1)[:, :, :end]
    s = np.einsum("bhqd,bhkd->bhqk", q64, k64) * scale
    if causal:
        s = np.where(np.arange(q.shape[2])[:, None] >= np.arange(end)[None, :], s, -np.inf)
    return s.max(axis=-1)


@given(cfg=tst.few(MHA, WIDE), causal=tst.booleans(), block_k=tst.few(32, 64), scale=tst.few(None, 0.3),
       seed=tst.seeds())
@example(cfg=WIDE, causal=True, block_k=64, scale=None, seed=0)
@example(cfg=MHA, causal=True, block_k=32, scale=None, seed=1)
@example(cfg=MHA, causal=False, block_k=64, scale=0.3, seed=2)
def test_rescale_invariant(impl, cfg, causal, block_k, scale, seed):
    """After step j, acc / l is attention over keys [0, (j + 1) · block_k), and m is their max score.

    Checked after the first step, the second (the first rescale), a middle one and the last; with
    the default scale and with scale 0.3 passed explicitly.
    """
    cfg = dataclasses.replace(cfg, causal=causal)
    q, k, v = cfg.arrays(seed)
    fn = impl.streaming.streaming_states
    kwargs = dict(causal=cfg.causal, block_k=block_k, **({} if scale is None else dict(scale=scale)))
    passed = ", ".join(f"{name}={value}" for name, value in kwargs.items())
    states = fn(q, k, v, **kwargs)
    n = cfg.kv_len // block_k
    b, h, sq, d = q.shape
    if not (isinstance(states, (tuple, list)) and len(states) == 3):
        checks.fail(fn, f"{fn.display} should return (m, l, acc), got {type(states).__name__}")
    m, l, acc = states
    want = {"m": (n, b, h, sq), "l": (n, b, h, sq), "acc": (n, b, h, sq, d)}
    for name, x in zip(want, states):
        checks.assert_equal(tuple(getattr(x, "shape", ())), want[name], fn=fn,
                            what=f"the shape of {name} (one entry per key block, stacked on axis 0)")
    scale = d ** -0.5 if scale is None else scale
    for j in sorted({0, 1, n // 2, n - 1}):
        end = (j + 1) * block_k
        checks.assert_close(m[j], _prefix_max(q, k, end, cfg.causal, scale), fn=fn, dtype="float32",
                            what=f"m after step {j} (max score over keys [0, {end}))")
        ratio = checks.graded(lambda *_, j=j: (acc[j] / l[j][..., None]).astype(q.dtype),
                              f"{fn.display}: acc / l after step {j}")
        prefix = jnp.arange(cfg.kv_len) < end  # keys [0, end) only; same shapes at every step
        checks.assert_matches_reference(
            ratio, (q, k, v), reference=references.ATTENTION.bind(mask=prefix, causal=cfg.causal, scale=scale),
            require_kernel=False, names=[f"attention over keys [0, {end})"],
            note=f"m, l, acc = streaming_states(q, k, v, {passed}), then acc[{j}] / l[{j}][..., None]")


def _states_agree(got, expected):
    """None when (m, l, acc) after each checked step hold the prefix max and the prefix attention."""
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        return f"returned a {type(got).__name__}; expected (m, l, acc)"
    m, l, acc = got
    for name, x, shape in zip(("m", "l", "acc"), got, expected["shapes"]):
        if tuple(getattr(x, "shape", ())) != tuple(shape):
            return f"{name} has shape {tuple(getattr(x, 'shape', ()))}; expected {tuple(shape)}"
    for j, (end, m_ref, oracle, floor) in enumerate(expected["steps"]):
        step = expected["indices"][j]
        why = checks.trusted.judge_array(np.asarray(m[step], np.float32), m_ref, None, dtype="float32",
                                         what=f"m after step {step} (max score over keys [0, {end}))")
        if why:
            return why
        ratio = (np.asarray(acc[step], np.float64) / np.asarray(l[step], np.float64)[..., None])
        why = checks.trusted.judge_array(ratio.astype(floor.dtype), oracle, floor,
                                         what=f"acc / l after step {step} (attention over keys [0, {end}))")
        if why:
            return why
    return None


def _expected_states(cfg, block_k, q, k, v):
    import jax

    n = cfg.kv_len // block_k
    b, h, sq, d = q.shape
    indices = sorted({0, 1, n // 2, n - 1})
    steps = []
    for j in indices:
        end = (j + 1) * block_k
        prefix = jnp.arange(cfg.kv_len) < end
        floor = np.asarray(references.attention_floor(q, k, v, prefix, causal=cfg.causal))
        with jax.enable_x64(True):
            oracle = np.asarray(references.attention_oracle(*(jnp.asarray(tst.as_float64(a)) for a in (q, k, v)),
                                                            prefix, causal=cfg.causal), np.float64)
        steps.append((end, _prefix_max(q, k, end, cfg.causal, d ** -0.5), oracle, floor))
    return {"shapes": [(n, b, h, sq), (n, b, h, sq), (n, b, h, sq, d)], "indices": indices, "steps": steps}


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a configuration and block the grader
    draws, a custom scale, and the states after the checked steps."""
    base = (MHA, GQA, WIDE)[int(rng.integers(3))]
    cfg = dataclasses.replace(base, causal=bool(rng.integers(2)), dtype=str(rng.choice(tst.DTYPES)))
    block_k = int(rng.choice(BLOCKS))
    cases = [checks.trusted.values("streaming_attention", cfg.arrays(checks.trusted.seed(rng)),
                                   kwargs=dict(causal=cfg.causal, block_k=block_k),
                                   reference=references.ATTENTION.bind(causal=cfg.causal),
                                   label=f"streaming_attention({cfg}, block_k={block_k})")]
    scale = float(rng.uniform(0.1, 0.5))
    cases.append(checks.trusted.values("streaming_attention", MHA.arrays(checks.trusted.seed(rng)),
                                       kwargs=dict(scale=scale, block_k=32),
                                       reference=references.ATTENTION.bind(scale=scale),
                                       label=f"streaming_attention({MHA}, scale={scale:.3f}, block_k=32)"))
    cfg = dataclasses.replace((MHA, WIDE)[int(rng.integers(2))], causal=bool(rng.integers(2)))
    block_k = int(rng.choice([32, 64]))
    q, k, v = cfg.arrays(checks.trusted.seed(rng))
    cases.append(checks.trusted.exact("streaming_states", (q, k, v), kwargs=dict(causal=cfg.causal, block_k=block_k),
                                      expected=_expected_states(cfg, block_k, q, k, v), compare=_states_agree,
                                      label=f"streaming_states({cfg}, block_k={block_k})"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
