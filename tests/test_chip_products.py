"""Products as the chip runs them (grading/chip_products.py): each rule read off the installed JAX's
TPU lowering (and libtpu's compiler, where installed), and graded calls refused on a CPU where the
chip would refuse them or compute them in one bfloat16 pass against a float32 bound."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl

from pytest_tpucourse import checks, chips, references
from pytest_tpucourse.core.outcomes import LearnerCodeError
from pytest_tpucourse.grading import chip_products
from pytest_tpucourse.readers import mosaic

V5E = chips.get_chip("v5e")
SHAPE = (128, 128)
PRESET = lax.DotAlgorithmPreset
# Every way a program can ask for a product's precision, unset included.
FORMS = {
    "unset": None, "DEFAULT": lax.Precision.DEFAULT, "HIGH": lax.Precision.HIGH, "HIGHEST": lax.Precision.HIGHEST,
    "'fastest'": "fastest", "'bfloat16'": "bfloat16", "'tensorfloat32'": "tensorfloat32", "'float32'": "float32",
    "(DEFAULT, HIGHEST)": (lax.Precision.DEFAULT, lax.Precision.HIGHEST),
    "BF16_BF16_F32": PRESET.BF16_BF16_F32, "F32_F32_F32": PRESET.F32_F32_F32,
}


def _kernel_dot(precision, out_dtype=jnp.float32):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=precision,
                             preferred_element_type=jnp.float32).astype(o_ref.dtype)

    def matmul(x, y):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(SHAPE, out_dtype))(x, y)
    return matmul


def _the_product(fn, dtype):
    x = jax.ShapeDtypeStruct(SHAPE, dtype)
    [product] = list(chip_products.products(jax.make_jaxpr(fn)(x, x)))
    return product


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("form", list(FORMS))
def test_what_a_kernel_dot_is_on_the_chip_is_what_the_tpu_lowering_makes_of_it(form, dtype):
    """Inside a Pallas kernel: the check calls a form refused exactly where Pallas' TPU lowering
    refuses it, and calls an f32 product one bf16 pass exactly where the lowering gives the
    Mosaic matmul no contract precision (Mosaic's default)."""
    fn = _kernel_dot(FORMS[form])
    product = _the_product(fn, dtype)
    said = chip_products.verdict(product, f32_bound=dtype == "float32")
    x = jax.ShapeDtypeStruct(SHAPE, dtype)
    try:
        [kernel] = mosaic.kernels(fn, x, x, chip=V5E)
    except Exception as error:
        assert said is not None and "would not compile" in said, (form, dtype, error)
        return
    lowered_one_pass = "contract_precision<" not in kernel.text  # fp32 (HIGHEST) or bf16x3 (HIGH): several
    if said is not None and "Bad lhs type" in said:  # libtpu's refusal, after the lowering (below)
        assert dtype == "bfloat16" and not lowered_one_pass
        return
    assert said is None or "would not compile" not in said, (form, dtype)
    if dtype == "float32":
        # Unset runs at the graded call's HIGHEST on a TPU: the lowering shows that under the context.
        if FORMS[form] is None:
            with jax.default_matmul_precision("highest"):
                [kernel] = mosaic.kernels(fn, x, x, chip=V5E)
            lowered_one_pass = "contract_precision<" not in kernel.text
        assert (said is not None) == lowered_one_pass, (form, said)


def test_mosaic_refuses_a_float32_contraction_of_bfloat16_operands():
    """The "Bad lhs type" rule, read off libtpu's compiler: HIGHEST on a bf16 kernel dot is refused,
    on an f32 one compiled."""
    from pytest_tpucourse.compiler import libtpu

    libtpu.skip_unless_available()
    fn = _kernel_dot(lax.Precision.HIGHEST)
    x32, x16 = (jax.ShapeDtypeStruct(SHAPE, d) for d in ("float32", "bfloat16"))
    libtpu.compile_for(fn, x32, x32, chip=V5E)
    with pytest.raises(libtpu.TpuCompileError, match="Bad lhs type"):
        libtpu.compile_for(fn, x16, x16, chip=V5E)


def _graded_matmul(precision=None, *, in_kernel=True, context=None):
    def matmul(x, y):
        if not in_kernel:
            return jnp.dot(x, y, precision=precision)

        def kernel(x_ref, y_ref, o_ref):
            if context is None:
                o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=precision)
            else:
                with jax.default_matmul_precision(context):
                    o_ref[...] = x_ref[...] @ y_ref[...]
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype))(x, y)
    return checks.graded(matmul, "matmul() in test")


def _operands(dtype):
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.standard_normal(SHAPE), dtype) for _ in range(2))


@pytest.mark.parametrize("how", [
    dict(precision=lax.Precision.DEFAULT),
    dict(precision="fastest"),
    dict(precision=("bfloat16", "bfloat16")),
    dict(context="bfloat16"),  # a default_matmul_precision block of the graded code's own
    dict(precision=lax.Precision.DEFAULT, in_kernel=False),  # XLA's dot on a TPU: one pass too
    dict(precision=PRESET.BF16_BF16_F32, in_kernel=False),
], ids=["DEFAULT", "fastest", "pair", "context", "xla", "algorithm"])
def test_a_float32_product_in_one_bf16_pass_is_refused_on_a_cpu(how):
    """A CPU computes each of these in f32, so their values pass; a TPU computes them in one bf16
    pass. The refusal names the cause, the line and the fix."""
    x, y = _operands("float32")
    with pytest.raises(LearnerCodeError) as failure:
        checks.assert_matches_reference(_graded_matmul(**how), (x, y), reference=references.MATMUL,
                                        require_kernel=False)
    message = str(failure.value)
    assert "Rounding in bfloat16 on a v5e" in message and "one bfloat16 pass" in message
    assert re.search(r"test_chip_products\.py:\d+", message), message
    assert "precision=lax.Precision.HIGHEST" in message


@pytest.mark.parametrize("how", [dict(), dict(precision=lax.Precision.HIGHEST), dict(context="float32"),
                                 dict(precision=lax.Precision.HIGHEST, in_kernel=False)],
                         ids=["unset", "HIGHEST", "context", "xla"])
def test_float32_products_the_chip_runs_in_float32_pass(how):
    x, y = _operands("float32")
    checks.assert_matches_reference(_graded_matmul(**how), (x, y), reference=references.MATMUL, require_kernel=False)


@pytest.mark.parametrize("precision", [None, lax.Precision.DEFAULT])
def test_a_bfloat16_call_keeps_its_one_pass(precision):
    """bf16 inputs are graded to a bound one pass meets: DEFAULT is no mistake there."""
    x, y = _operands("bfloat16")
    checks.assert_matches_reference(_graded_matmul(precision), (x, y), reference=references.MATMUL)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_high_in_a_kernel_is_judged_as_this_jaxs_lowering_makes_it(dtype):
    """HIGH: refused where the installed lowering refuses it (JAX 0.10.2); where it is lowered to three
    bf16 passes (0.11 and later), an f32 dot at HIGH is graded by its values and a bf16 one is
    Mosaic's "Bad lhs type"."""
    x, y = _operands(dtype)
    if chip_products.lowering_refuses("HIGH"):
        with pytest.raises(LearnerCodeError, match="would not compile for a v5e TPU: .*Unsupported dot precision"):
            checks.assert_matches_reference(_graded_matmul(lax.Precision.HIGH), (x, y), reference=references.MATMUL)
    elif dtype == "bfloat16":
        with pytest.raises(LearnerCodeError, match="Bad lhs type"):
            checks.assert_matches_reference(_graded_matmul(lax.Precision.HIGH), (x, y), reference=references.MATMUL)
    else:
        checks.assert_matches_reference(_graded_matmul(lax.Precision.HIGH), (x, y), reference=references.MATMUL)


@pytest.mark.parametrize("precision, says", [
    ((lax.Precision.DEFAULT, lax.Precision.HIGHEST), "Per-operand dot precision unsupported"),
    (PRESET.F32_F32_F32, "takes no dot algorithm"),
])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_kernel_dot_the_lowering_refuses_is_refused_in_every_dtype(precision, says, dtype):
    x, y = _operands(dtype)
    with pytest.raises(LearnerCodeError, match=f"would not compile for a v5e TPU: .*{re.escape(says)}"):
        checks.assert_matches_reference(_graded_matmul(precision), (x, y), reference=references.MATMUL)


def test_highest_on_a_bfloat16_kernel_dot_is_refused():
    x, y = _operands("bfloat16")
    with pytest.raises(LearnerCodeError, match='Bad lhs type'):
        checks.assert_matches_reference(_graded_matmul(lax.Precision.HIGHEST), (x, y), reference=references.MATMUL)
