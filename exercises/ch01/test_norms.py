"""Graded tests for ch01.norms: layer_norm(x, gamma, beta, *, eps) and rms_norm(x, gamma, *, eps)."""

from hypothesis import example, given

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

SHAPES = ((16, 256), (2, 8, 96), (96,))  # x is (..., N): each rank is an explicit example
# Rows of x: mean 3 and scale 2 (both the centring and the scaling matter), or spread by about 3e-3,
# a variance (and a mean square) about as large as the default eps, where eps's place decides the result.
KINDS = ("normal", "low_variance")
# eps as the call passes it: None leaves the default; 0.5 is large against rows of variance 4, so a
# norm that ignores its argument or adds it outside the square root is off by percents.
EPS = (None, 0.5)


def _inputs(shape, dtype, seed, kind="normal"):
    n = shape[-1]
    if kind == "low_variance":
        x = tst.random_array(shape, dtype, seed, kind="low_variance")
    else:
        x = tst.random_array(shape, dtype, seed, offset=3.0, scale=2.0)
    gamma = tst.random_array((n,), dtype, seed + 1, offset=1.0, scale=0.5)
    beta = tst.random_array((n,), dtype, seed + 2)
    return x, gamma, beta


def _with_eps(reference, eps):
    """(the call's keyword arguments, the reference bound to them): eps passed only when given."""
    kwargs = {} if eps is None else dict(eps=eps)
    return kwargs, (reference.bind(**kwargs) if kwargs else reference)


@given(shape=tst.few(*SHAPES), dtype=tst.dtypes(), kind=tst.few(*KINDS), eps=tst.few(*EPS), seed=tst.seeds())
@example(shape=SHAPES[1], dtype="float32", kind="normal", eps=None, seed=0)
@example(shape=SHAPES[0], dtype="bfloat16", kind="normal", eps=0.5, seed=0)
@example(shape=SHAPES[2], dtype="float32", kind="low_variance", eps=None, seed=1)
@example(shape=SHAPES[1], dtype="bfloat16", kind="low_variance", eps=None, seed=2)
def test_layer_norm_matches_reference(impl, shape, dtype, kind, eps, seed):
    kwargs, reference = _with_eps(references.LAYERNORM, eps)
    checks.assert_matches_reference(impl.norms.layer_norm, _inputs(shape, dtype, seed, kind), kwargs=kwargs,
                                    reference=reference, require_kernel=False)


@given(shape=tst.few(*SHAPES), dtype=tst.dtypes(), kind=tst.few(*KINDS), eps=tst.few(*EPS), seed=tst.seeds())
@example(shape=SHAPES[1], dtype="float32", kind="normal", eps=None, seed=0)
@example(shape=SHAPES[0], dtype="bfloat16", kind="normal", eps=0.5, seed=0)
@example(shape=SHAPES[2], dtype="float32", kind="low_variance", eps=None, seed=1)
@example(shape=SHAPES[1], dtype="bfloat16", kind="low_variance", eps=None, seed=2)
def test_rms_norm_matches_reference(impl, shape, dtype, kind, eps, seed):
    kwargs, reference = _with_eps(references.RMSNORM, eps)
    x, gamma, _ = _inputs(shape, dtype, seed, kind)
    checks.assert_matches_reference(impl.norms.rms_norm, (x, gamma), kwargs=kwargs, reference=reference,
                                    require_kernel=False)


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
    """Checked outside the tree's process (docs/grading.md): both norms on a drawn shape and dtype
    with an explicit eps, on rows whose variance is about the default eps, and their grads, on
    values the tree has never seen."""
    cases = []
    for function, reference, count in (("layer_norm", references.LAYERNORM, 3), ("rms_norm", references.RMSNORM, 2)):
        shape, dtype = SHAPES[int(rng.integers(len(SHAPES)))], str(rng.choice(tst.DTYPES))
        kwargs, bound = _with_eps(reference, EPS[1])
        cases.append(checks.trusted.values(function, _inputs(shape, dtype, checks.trusted.seed(rng))[:count],
                                           kwargs=kwargs, reference=bound))
        cases.append(checks.trusted.values(
            function, _inputs(SHAPES[int(rng.integers(len(SHAPES)))], "float32", checks.trusted.seed(rng),
                              "low_variance")[:count], reference=reference))
        cases.append(checks.trusted.grads(
            function, _inputs(SHAPES[1], "float32", checks.trusted.seed(rng))[:count], reference=reference,
            argnames=("dx", "dgamma", "dbeta")[:count], cotangent_seed=checks.trusted.seed(rng)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
