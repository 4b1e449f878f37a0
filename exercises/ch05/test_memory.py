"""Graded tests for ch05.memory: temp_bytes(fn, *args), and no S² buffer in streaming attention.

The criterion: XLA's temp allocation (memory_analysis().temp_size_in_bytes) over
S = 256, 512, 1024, 2048 (one head, D = 64, f32) must grow as S^p with p ≤ 1.2
for streaming attention. Naive attention, measured the same way, gives p = 2.
"""

import jax
import jax.numpy as jnp
import numpy as np

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

SEQ_LENS = (256, 512, 1024, 2048)


def _specs(s):
    x = jax.ShapeDtypeStruct((1, 1, s, 64), jnp.float32)
    return x, x, x


def _exponent(values):
    return float(np.polyfit(np.log(SEQ_LENS), np.log(np.maximum(values, 1)), 1)[0])


def test_temp_bytes_is_xlas_figure(impl):
    fn = impl.memory.temp_bytes
    got = fn(references.attention_floor, *_specs(256))
    want = jax.jit(references.attention_floor).lower(*_specs(256)).compile().memory_analysis().temp_size_in_bytes
    assert got == want, (f"{fn.display} gives {got} for naive attention at S = 256; XLA's "
                         f"memory_analysis().temp_size_in_bytes is {want}")


def test_naive_attention_needs_s_squared_scratch(impl):
    values = [impl.memory.temp_bytes(references.attention_floor, *_specs(s)) for s in SEQ_LENS]
    p = _exponent(values)
    assert 1.8 <= p <= 2.2, (f"{impl.memory.temp_bytes.display}: naive attention's temp bytes {values} over "
                             f"S = {SEQ_LENS} grow as S**{p:.2f}; expected ~2 (the scores)")


def test_streaming_attention_has_no_s_squared_buffer(impl):
    impl.memory.temp_bytes(jnp.tanh, jnp.ones(8))
    q, k, v = tst.AttentionConfig(1, 1, 1, 128, 128, 64, False, "float32").arrays(0)
    impl.streaming.streaming_attention(q, k, v, block_k=64)
    streaming = impl.streaming.streaming_attention.resolve()
    values = [impl.memory.temp_bytes(lambda q, k, v: streaming(q, k, v, block_k=128), *_specs(s))
              for s in SEQ_LENS]
    p = _exponent(values)
    squared = [s * s * 4 for s in SEQ_LENS]
    assert p <= 1.2 and values[-1] < squared[-1] / 2, (
        f"{impl.streaming.streaming_attention.display}: temp bytes {values} over S = {SEQ_LENS} "
        f"(block_k=128) grow as S**{p:.2f}; expected at most S**1.2, and at S = 2048 under half the "
        f"{squared[-1]} bytes of one f32 (S, S) matrix: something of size Sq x Skv still exists")


def _spec(s):
    return jax.ShapeDtypeStruct((1, 1, s, 64), jnp.float32)


def _naive_attention():
    return references.attention_floor


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): XLA's figure for naive attention at a
    length the grader draws (that streaming attention has no S² buffer, only the tree's process sees)."""
    s = int(rng.integers(2, 33)) * 64
    want = jax.jit(references.attention_floor).lower(*_specs(s)).compile().memory_analysis().temp_size_in_bytes
    spec = checks.trusted.built(_spec, s, label=f"f32[1, 1, {s}, 64]")
    return [checks.trusted.exact("temp_bytes", (checks.trusted.built(_naive_attention, label="naive attention"),
                                                spec, spec, spec), expected=int(want), what="the temp bytes")]


TRUSTED = checks.trusted.Cases(_trusted_cases)
