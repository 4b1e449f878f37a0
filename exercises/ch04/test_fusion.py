"""Graded tests for ch04.fusion: gelu_bias(x, b) is one fusion; naive_attention(q, k, v) cannot be."""

import math
import re

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

# Instructions of an ENTRY computation that launch no kernel. A `copy` does: it rewrites an array.
NOT_KERNELS = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}


def _gelu_bias(x, b):
    z = x + b
    return 0.5 * z * (1.0 + jnp.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))


def _in_f32(x, b):
    return _gelu_bias(x.astype(jnp.float32), b.astype(jnp.float32)).astype(x.dtype)


GELU_BIAS = references.Reference("gelu_bias", _gelu_bias, _in_f32)


def _entry(function, *args):
    text = jax.jit(function).lower(*args).compile().as_text()
    return text[text.index("\nENTRY"):]


def _kernels(entry):
    """(opcode, shape, line) of every ENTRY instruction that runs a kernel."""
    found = []
    for line in entry.splitlines()[1:]:
        m = re.match(r"\s*(?:ROOT\s+)?%\S+\s*=\s*(.*?)\s([\w\-]+)\(", line)
        if m and m.group(2) not in NOT_KERNELS:
            found.append((m.group(2), m.group(1), line.strip()[:110]))
    return found


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_bias_values(impl, dtype):
    x = tst.random_array((256, 512), dtype, 0, scale=2.0)
    b = tst.random_array((512,), dtype, 1)
    checks.assert_matches_reference(impl.fusion.gelu_bias, (x, b), reference=GELU_BIAS,
                                    require_kernel=False)


# Whether XLA converts the bf16 bias to f32 in a kernel of its own before gelu_bias's fusion: XLA:CPU
# fuses the convert, XLA:TPU does not (a `convert` to f32[512] in VMEM, then one kLoop fusion:
# exercises/ch04/facts/v5e.json, "gelu_bias bfloat16").
CONVERTS_THE_BIAS_ALONE = {"cpu": False, "tpu": True}


def _elements(shape: str) -> int:
    dims = re.match(r"\w+\[([\d,]*)\]", shape)
    return math.prod(int(d) for d in dims.group(1).split(",") if d) if dims else -1


def gelu_bias_kernels_wrong(kernels, bias_size: int, *, converts_the_bias_alone: bool) -> str | None:
    """Why gelu_bias's kernels ((opcode, shape, line) of its ENTRY) are not one fusion, or None."""
    if converts_the_bias_alone:
        kernels = [k for k in kernels if not (k[0] == "convert" and 0 < _elements(k[1]) <= bias_size)]
    if len(kernels) == 1 and kernels[0][0] == "fusion":
        return None
    beside = " beside XLA:TPU's own convert of the bias" if converts_the_bias_alone else ""
    return f"compiles to {len(kernels)} kernel(s){beside}, expected exactly one fusion"


def test_gelu_bias_is_one_fusion(impl):
    x = tst.random_array((256, 512), "bfloat16", 0)
    b = tst.random_array((512,), "bfloat16", 1)
    impl.fusion.gelu_bias(x, b)
    kernels = _kernels(_entry(impl.fusion.gelu_bias.resolve(), x, b))
    why = gelu_bias_kernels_wrong(kernels, b.size,
                                  converts_the_bias_alone=checks.for_this_backend(CONVERTS_THE_BIAS_ALONE))
    if why:
        checks.fail(impl.fusion.gelu_bias, f"{impl.fusion.gelu_bias.display} {why}:\n  "
                    + "\n  ".join(k[2] for k in kernels))


def test_naive_attention_values(impl):
    cfg = tst.AttentionConfig(1, 2, 2, 128, 128, 64, False, "float32")
    q, k, v = cfg.arrays(0)
    checks.assert_matches_reference(impl.fusion.naive_attention, (q, k, v), reference=references.ATTENTION,
                                    require_kernel=False)


def test_naive_attention_materialises_the_scores(impl):
    """Several kernels, and one of them writes an (.., S, S) buffer: the scores exist in memory."""
    s = 256
    cfg = tst.AttentionConfig(1, 2, 2, s, s, 64, False, "float32")
    q, k, v = cfg.arrays(0)
    impl.fusion.naive_attention(q, k, v)
    kernels = _kernels(_entry(impl.fusion.naive_attention.resolve(), q, k, v))
    listing = "\n  ".join(k[2] for k in kernels)
    fn = impl.fusion.naive_attention
    if len(kernels) < 2:
        checks.fail(fn, f"{fn.display} compiles to {len(kernels)} kernel; naive attention cannot be one "
                        f"fusion:\n  {listing}")
    square = [k for k in kernels if re.search(rf"\[(?:\d+,)*{s},{s}\]", k[1])]
    if not square:
        checks.fail(fn, f"{fn.display}: no kernel writes an (.., {s}, {s}) score buffer; write attention the "
                        f"obvious way (scores, softmax, P·V):\n  {listing}")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): both functions' values on inputs the
    grader draws (that one is a single fusion and the other is not, only the tree's process sees)."""
    dtype, seed = str(rng.choice(tst.DTYPES)), checks.trusted.seed(rng)
    x = tst.random_array((256, 512), dtype, seed, scale=2.0)
    b = tst.random_array((512,), dtype, seed + 1)
    cfg = tst.AttentionConfig(1, 2, 2, 128, 128, 64, False, "float32")
    return [checks.trusted.values("gelu_bias", (x, b), reference=GELU_BIAS),
            checks.trusted.values("naive_attention", cfg.arrays(checks.trusted.seed(rng)),
                                  reference=references.ATTENTION)]


TRUSTED = checks.trusted.Cases(_trusted_cases)
