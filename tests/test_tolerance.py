"""The tolerance rule accepts every correct implementation and rejects the known-wrong ones.

JAX's own Pallas TPU kernels (flash attention, splash attention, matmul) are graded
here exactly as a learner's kernel would be. The full evidence table, with more
shapes, is docs/checking.md ("The tolerance rule") (python bench/tolerance_evidence.py).
"""

import jax.numpy as jnp
import pytest

from pytest_tpucourse import checks, public_kernels, references
from pytest_tpucourse.run.mutants import build_tree, load_mutants
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.core.outcomes import WrongResult

from .support import REPO

ATTENTION_CASES = [
    tst.AttentionConfig(1, 2, 2, 256, 256, 128, causal, dtype)
    for causal in (False, True) for dtype in ("bfloat16", "float32")
]


def fully_bf16_attention(q, k, v, *, causal=False):
    """WRONG: scores, softmax and P·V accumulated and stored in bf16."""
    return references.attention(q, k, v, causal=causal, probabilities_dtype=jnp.bfloat16,
                                accumulate=jnp.bfloat16)


@pytest.mark.parametrize("kernel", ["flash_attention", "splash_attention"])
@pytest.mark.parametrize("config", ATTENTION_CASES, ids=str)
def test_jax_attention_kernels_pass_values_and_grads(kernel, config):
    fn = checks.graded(getattr(public_kernels, kernel), f"jax ops.tpu {kernel}")
    q, k, v = config.arrays(seed=0)
    reference = references.ATTENTION.bind(causal=config.causal)
    kwargs = dict(causal=config.causal)
    checks.assert_matches_reference(fn, (q, k, v), reference=reference, kwargs=kwargs, names=("out",))
    checks.assert_grads_match(fn, (q, k, v), reference=reference, kwargs=kwargs,
                              argnames=("dq", "dk", "dv"), seed=1,
                              check_custom_vjp=config.dtype == "float32" and kernel == "flash_attention")


def test_the_xla_floor_itself_passes():
    q, k, v = ATTENTION_CASES[1].arrays(seed=0)
    fn = checks.graded(references.attention_floor, "XLA floor")
    checks.assert_matches_reference(fn, (q, k, v), reference=references.ATTENTION, require_kernel=False)
    checks.assert_grads_match(fn, (q, k, v), reference=references.ATTENTION, argnames=("dq", "dk", "dv"))


@pytest.mark.parametrize("k", [512, 2048])
def test_jax_matmul_passes(k):
    x = tst.random_array((256, k), "bfloat16", 0)
    y = tst.random_array((k, 256), "bfloat16", 1)
    checks.assert_matches_reference(checks.graded(public_kernels.matmul, "jax ops.tpu matmul"),
                                    (x, y), reference=references.MATMUL)


@pytest.mark.parametrize("causal", [False, True])
def test_fully_bf16_attention_is_rejected_forward_and_backward(causal):
    q, k, v = ATTENTION_CASES[0].arrays(seed=0)
    fn = checks.graded(fully_bf16_attention, "fully bf16 attention")
    reference = references.ATTENTION.bind(causal=causal)
    with pytest.raises(WrongResult, match="output is wrong"):
        checks.assert_matches_reference(fn, (q, k, v), reference=reference, kwargs=dict(causal=causal),
                                        require_kernel=False)
    with pytest.raises(WrongResult, match="grad dq is wrong"):
        checks.assert_grads_match(fn, (q, k, v), reference=reference, kwargs=dict(causal=causal),
                                  argnames=("dq", "dk", "dv"))


def test_bf16_accumulation_is_rejected_even_at_k_512(tmp_path):
    """The shipped ch11 mutant: a Pallas matmul whose accumulator is bf16."""
    import importlib.util

    mutant = next(m for m in load_mutants(REPO / "tests" / "mutants" / "ch11.toml")
                  if m.name == "matmul_bf16_accumulator")
    path = build_tree(mutant, REPO / "solutions", tmp_path) / "ch11" / "matmul.py"
    spec = importlib.util.spec_from_file_location("bf16_accumulator_matmul", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = tst.random_array((256, 512), "bfloat16", 0)
    y = tst.random_array((512, 256), "bfloat16", 1)
    with pytest.raises(WrongResult, match="output is wrong"):
        checks.assert_matches_reference(checks.graded(module.matmul, "bf16-accumulating matmul"),
                                        (x, y), kwargs=dict(bm=128, bk=128, bn=128),  # 4 k steps
                                        reference=references.MATMUL)


# ---------------------------------------------------------------- the rounded reference

# Just above the tie between 1 and the next bfloat16, 1 + 2**-7: nearest is 1 + 2**-7; through
# float32 first, the 2**-30 is dropped, the tie goes to even, and the value becomes 1.
ABOVE_A_BFLOAT16_TIE = 1 + 2**-8 + 2**-30


def test_the_installed_ml_dtypes_casts_float64_to_bfloat16_as_its_version_says():
    """Read off the toolchain: ml_dtypes before 0.7 rounds float64 into bfloat16 twice, through
    float32 (the reason tolerance.round_once exists); 0.7 rounds once."""
    import importlib.metadata

    import ml_dtypes
    import numpy as np

    cast = float(np.array([ABOVE_A_BFLOAT16_TIE]).astype(ml_dtypes.bfloat16).astype(np.float64)[0])
    major_minor = tuple(int(part) for part in importlib.metadata.version("ml_dtypes").split(".")[:2])
    assert cast == (1 + 2**-7 if major_minor >= (0, 7) else 1.0)


def test_a_reference_is_rounded_once_into_its_dtype():
    """Every value rounded to the nearest bfloat16 (ties to even), checked exactly with fractions
    against both neighbours; signs, ties, overflow, underflow and non-finite values included."""
    import fractions

    import ml_dtypes
    import numpy as np

    from pytest_tpucourse.core.tolerance import round_once, rounded_reference

    bf16 = ml_dtypes.bfloat16
    edges = np.array([ABOVE_A_BFLOAT16_TIE, -ABOVE_A_BFLOAT16_TIE, 1 + 2**-8, 1 + 3 * 2**-8, 1e-50, -1e-50,
                      3.5e38, -1e39, np.inf, np.nan, 0.0, -0.0])
    rounded = rounded_reference(edges, "bfloat16")
    assert rounded[:8].tolist() == [1 + 2**-7, -(1 + 2**-7), 1.0, 1 + 2**-6, 0.0, -0.0, np.inf, -np.inf]
    assert rounded[8] == np.inf and np.isnan(rounded[9]) and np.signbit(rounded[11])

    rng = np.random.default_rng(0)
    values = rng.standard_normal(3000) * np.exp2(rng.integers(-120, 120, 3000))
    bits = round_once(values, bf16).view(np.uint16)
    for value, mine in zip(values.tolist(), bits.tolist()):
        exact = fractions.Fraction(value)
        distance = abs(exact - fractions.Fraction(float(np.array([mine], np.uint16).view(bf16)[0])))
        for neighbour in (mine - 1, mine + 1):
            other = abs(exact - fractions.Fraction(float(np.array([neighbour], np.uint16).view(bf16)[0])))
            assert other > distance or (other == distance and mine % 2 == 0), (value, mine, neighbour)
    assert rounded_reference(np.array([ABOVE_A_BFLOAT16_TIE]), "float32")[0] == np.float32(ABOVE_A_BFLOAT16_TIE)
