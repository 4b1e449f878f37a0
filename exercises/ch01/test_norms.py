"""Graded tests for ch01.norms: layer_norm(x, gamma, beta, *, eps) and rms_norm(x, gamma, *, eps)."""

from hypothesis import example, given

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

SHAPES = ((16, 256), (2, 8, 96), (96,))  # x is (..., N): each rank is an explicit example


def _inputs(shape, dtype, seed):
    n = shape[-1]
    # Mean 3, scale 2: both the centring and the scaling matter.
    x = tst.random_array(shape, dtype, seed, offset=3.0, scale=2.0)
    gamma = tst.random_array((n,), dtype, seed + 1, offset=1.0, scale=0.5)
    beta = tst.random_array((n,), dtype, seed + 2)
    return x, gamma, beta


@given(shape=tst.few(*SHAPES), dtype=tst.dtypes(), seed=tst.seeds())
@example(shape=SHAPES[1], dtype="float32", seed=0)
@example(shape=SHAPES[0], dtype="bfloat16", seed=0)
@example(shape=SHAPES[2], dtype="float32", seed=1)
def test_layer_norm_matches_reference(impl, shape, dtype, seed):
    x, gamma, beta = _inputs(shape, dtype, seed)
    checks.assert_matches_reference(
        impl.norms.layer_norm, (x, gamma, beta), reference=references.LAYERNORM, require_kernel=False)


@given(shape=tst.few(*SHAPES), dtype=tst.dtypes(), seed=tst.seeds())
@example(shape=SHAPES[1], dtype="float32", seed=0)
@example(shape=SHAPES[0], dtype="bfloat16", seed=0)
@example(shape=SHAPES[2], dtype="float32", seed=1)
def test_rms_norm_matches_reference(impl, shape, dtype, seed):
    x, gamma, _ = _inputs(shape, dtype, seed)
    checks.assert_matches_reference(
        impl.norms.rms_norm, (x, gamma), reference=references.RMSNORM, require_kernel=False)


def test_layer_norm_grads(impl):
    shape, seed = SHAPES[1], 4
    x, gamma, beta = _inputs(shape, "float32", seed)
    checks.assert_grads_match(
        impl.norms.layer_norm, (x, gamma, beta), reference=references.LAYERNORM,
        argnames=("dx", "dgamma", "dbeta"), seed=seed)


def test_rms_norm_grads(impl):
    shape, seed = SHAPES[1], 4
    x, gamma, _ = _inputs(shape, "float32", seed)
    checks.assert_grads_match(
        impl.norms.rms_norm, (x, gamma), reference=references.RMSNORM,
        argnames=("dx", "dgamma"), seed=seed)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): both norms on a drawn shape and dtype,
    and their grads, on values the tree has never seen."""
    cases = []
    for function, reference, count in (("layer_norm", references.LAYERNORM, 3), ("rms_norm", references.RMSNORM, 2)):
        shape, dtype = SHAPES[int(rng.integers(len(SHAPES)))], str(rng.choice(tst.DTYPES))
        cases.append(checks.trusted.values(function, _inputs(shape, dtype, checks.trusted.seed(rng))[:count],
                                           reference=reference))
        cases.append(checks.trusted.grads(
            function, _inputs(SHAPES[1], "float32", checks.trusted.seed(rng))[:count], reference=reference,
            argnames=("dx", "dgamma", "dbeta")[:count], cotangent_seed=checks.trusted.seed(rng)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
