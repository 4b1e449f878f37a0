"""Graded tests for ch01.softmax: softmax(x, *, axis)."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

SHAPES = ((12, 96), (4, 6, 40))


def _check(impl, x, axis, label):
    checks.assert_matches_reference(
        impl.softmax.softmax, (x,), kwargs=dict(axis=axis), require_kernel=False,
        reference=references.SAFE_SOFTMAX.bind(axis=axis))


# Every axis of each rank is an explicit example, so every profile (the learner's dev, which
# draws only what the explicit examples hold, included) normalises along each of them: a
# softmax right along some axes of some ranks (axis 0 as a 2-D transpose) fails somewhere.
@given(shape=tst.few(*SHAPES), axis=tst.few(-1, 0, 1), dtype=tst.dtypes(),
       kind=tst.few("normal", "large", "masked"), seed=tst.seeds())
@example(shape=SHAPES[0], axis=0, dtype="bfloat16", kind="large", seed=1)
@example(shape=SHAPES[0], axis=-1, dtype="float32", kind="masked", seed=2)
@example(shape=SHAPES[1], axis=0, dtype="bfloat16", kind="normal", seed=3)
@example(shape=SHAPES[1], axis=1, dtype="float32", kind="normal", seed=0)
@example(shape=SHAPES[1], axis=-1, dtype="float32", kind="large", seed=4)
def test_softmax_matches_reference(impl, shape, axis, dtype, kind, seed):
    x = tst.random_array(shape, dtype, seed, kind=kind)
    _check(impl, x, axis, f"{kind} values, seed {seed}")


def test_softmax_of_a_vector(impl):
    """Rank 1: the one axis, named 0."""
    _check(impl, tst.random_array((96,), "float32", 5, kind="masked"), 0, "masked values, seed 5")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["large", "equal_rows", "tiny", "masked", "fully_masked_rows"])
def test_softmax_value_corner_cases(impl, kind, dtype):
    """Logits of 1e4 (exp overflows without the max), equal rows, 1e-30, -inf entries, all -inf rows."""
    x = tst.random_array((12, 96), dtype, 0, kind=kind)
    _check(impl, x, -1, f"{kind} values, seed 0")


def test_softmax_fully_masked_slice_along_axis_0(impl):
    """Column 0 is all -inf: softmax over axis 0 must give zeros there, and ordinary columns elsewhere."""
    x = np.array([[-np.inf, 1.0, -np.inf], [-np.inf, 2.0, 0.5], [-np.inf, -np.inf, 3.0]], np.float32)
    _check(impl, jnp.asarray(x), 0, "column 0 fully masked")


@pytest.mark.parametrize("axis, kind", [(-1, "masked"), (1, "normal"), (-1, "fully_masked_rows")])
def test_softmax_grads(impl, axis, kind):
    """Gradients along the last and a middle axis; zero (not NaN) on fully masked rows."""
    shape = SHAPES[1]
    x = tst.random_array(shape, "float32", 3, kind=kind)
    checks.assert_grads_match(
        impl.softmax.softmax, (x,), kwargs=dict(axis=axis), argnames=("dx",), seed=3,
        reference=references.SAFE_SOFTMAX.bind(axis=axis))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): both shapes over a drawn axis, dtype
    and value kind, fully masked rows, and the grads over a middle axis, on values the tree has
    never seen."""
    cases = []
    for shape, kind in ((SHAPES[0], str(rng.choice(["normal", "large", "masked"]))), (SHAPES[1], "fully_masked_rows")):
        axis, dtype = int(rng.choice([-1, 0, 1])), str(rng.choice(tst.DTYPES))
        x = tst.random_array(shape, dtype, checks.trusted.seed(rng), kind=kind)
        cases.append(checks.trusted.values("softmax", (x,), kwargs=dict(axis=axis),
                                           reference=references.SAFE_SOFTMAX.bind(axis=axis),
                                           label=f"softmax(x {dtype}{list(shape)}, axis={axis}) on {kind} values"))
    x = tst.random_array(SHAPES[1], "float32", checks.trusted.seed(rng), kind="masked")
    cases.append(checks.trusted.grads("softmax", (x,), kwargs=dict(axis=1), argnames=("dx",),
                                      reference=references.SAFE_SOFTMAX.bind(axis=1),
                                      cotangent_seed=checks.trusted.seed(rng)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
