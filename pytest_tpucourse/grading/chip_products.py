"""The matrix products of a graded program as a TPU runs them: refused on any machine where the
chip would refuse them, or compute them too coarsely for the bound the call is graded to.

A CPU computes every float32 product in float32, whatever precision the program asks for; a
TPU does not, so a kernel can pass every value test on a laptop and fail on the chip. What the
chip does with each product is read off the program's jaxpr (each dot_general's precision and
operand dtypes), the same on every machine:

- Inside a Pallas kernel, JAX's Mosaic lowering (jax/_src/pallas/mosaic/lowering.py) gives a dot
  at precision None or DEFAULT no contract precision (Mosaic's default: one bfloat16 MXU pass for
  float32 operands), HIGHEST `#tpu.contract_precision<fp32>`, and refuses per-operand precisions
  and dot algorithms. HIGH depends on the JAX: 0.10.2 refuses it ("Unsupported dot precision"),
  0.11 and later lower it to `#tpu.contract_precision<bf16x3>` (`lowering_refuses` reads which).
  Mosaic then refuses a multi-pass contraction of bfloat16 operands ("Bad lhs type", seen on a v5e). A matrix-vector
  product of narrow operands is lowered to a multiply and a sum, where precision plays no part.
- Outside kernels, XLA on a TPU computes a float32 dot at DEFAULT in one bfloat16 pass too.
- A graded call whose float inputs are all float32 runs at `default_matmul_precision("highest")`
  on the chip (context.graded_precision): a product whose precision is unset runs at HIGHEST
  there, but one asked for at DEFAULT, in any spelling that comes to it ("bfloat16", "fastest",
  a `default_matmul_precision` block of the graded code's own), is one bfloat16 pass: about
  2e-3 relative off on a v5e (bench/tpu/precision.json), far over a float32 bound. Calls with
  narrower inputs are graded to a bound one pass meets.

tests/test_chip_products.py reads each rule off the installed JAX's lowering (and libtpu's
compiler, where installed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

ONE_PASS_ERROR = "about 2e-3"  # relative error of an f32 matmul in one bf16 pass on a v5e (bench/tpu/precision.json)


class ChipRefusesProduct(Exception):
    """A product the chip refuses to compile, or computes too coarsely for the call's bound."""


@dataclass(frozen=True)
class Product:
    """One dot_general of a program, as the check sees it."""

    precision: object  # the equation's canonical precision: None, a pair of lax.Precision, or an algorithm
    dtypes: tuple[str, str]  # the operands'
    in_kernel: bool
    vector_unit: bool  # Mosaic lowers it to a multiply and a sum (a narrow matrix-vector product)
    where: str  # "file.py:12" of the code that made it, or ""


def check(closed_jaxpr, *, f32_bound: bool, chip_name: str = "TPU", show_path=str) -> None:
    """Raise ChipRefusesProduct for the first product of the program the chip would refuse, or run
    in one bfloat16 pass where the call is graded to a float32 bound (f32_bound). show_path(path)
    is how a message shows the file of the line that made the product."""
    for product in products(closed_jaxpr, show_path):
        problem = verdict(product, f32_bound=f32_bound, chip_name=chip_name)
        if problem is not None:
            raise ChipRefusesProduct(problem)


def products(closed_jaxpr, show_path=str):
    """Every dot_general of the program, pallas_call bodies and other sub-jaxprs included."""
    from ..readers.traced_program import sub_jaxprs

    def walk(jaxpr, in_kernel):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                yield _product(eqn, in_kernel, show_path)
            inner = in_kernel or eqn.primitive.name == "pallas_call"
            for sub in sub_jaxprs(eqn):
                yield from walk(sub, inner)

    yield from walk(closed_jaxpr.jaxpr, False)


def _product(eqn, in_kernel: bool, show_path) -> Product:
    from ..core.jax_internals import equation_location

    lhs, rhs = (v.aval for v in eqn.invars[:2])
    (lhs_dims, rhs_dims), _ = eqn.params["dimension_numbers"]
    vector_unit = (in_kernel and tuple(lhs_dims) == (1,) and tuple(rhs_dims) == (1,) and len(lhs.shape) == 2
                   and len(rhs.shape) == 2 and rhs.shape[0] == 1
                   and not (str(lhs.dtype) == "float32" and str(rhs.dtype) == "float32"))
    try:
        location = equation_location(eqn)
        where = f"{show_path(location.file)}:{location.line}" if location is not None else ""
    except Exception:
        where = ""
    return Product(eqn.params.get("precision"), (str(lhs.dtype), str(rhs.dtype)), in_kernel, vector_unit, where)


def verdict(product: Product, *, f32_bound: bool, chip_name: str = "TPU") -> str | None:
    """What the chip makes of one product, in the course's words, or None where it is fine."""
    from jax import lax

    precision = product.precision
    at = f" ({product.where})" if product.where else ""
    if product.in_kernel and not product.vector_unit:
        pair = precision if isinstance(precision, tuple) else None
        if pair is not None and pair[0] != pair[1]:
            return (f"would not compile for a {chip_name} TPU: a dot inside its Pallas kernel asks for a precision per "
                    f"operand, {_spelled(precision)}{at}, and Pallas' TPU lowering refuses it (\"Per-operand dot "
                    f"precision unsupported\"). {_KERNEL_PRECISIONS}")
        single = pair[0] if pair is not None else precision
        if not isinstance(single, (lax.Precision, type(None))):
            return (f"would not compile for a {chip_name} TPU: a dot inside its Pallas kernel asks for "
                    f"{_spelled(precision)}{at}, and Pallas' TPU lowering takes no dot algorithm, only a "
                    f"precision. {_KERNEL_PRECISIONS}")
        if single not in (None, lax.Precision.DEFAULT, lax.Precision.HIGHEST) and lowering_refuses(single.name):
            return (f"would not compile for a {chip_name} TPU: a dot inside its Pallas kernel asks for "
                    f"{_spelled(precision)}{at}, and Pallas' TPU lowering refuses it (\"Unsupported dot "
                    f"precision\"). {_KERNEL_PRECISIONS}")
        narrow = [d for d in product.dtypes if d in ("bfloat16", "float16")]
        if single in (lax.Precision.HIGH, lax.Precision.HIGHEST) and narrow:
            return (f"would not compile for a {chip_name} TPU: a {narrow[0]} dot inside its Pallas kernel asks for "
                    f"precision {single.name}{at}, a contraction in several passes, and Mosaic refuses one of "
                    f"{narrow[0]} operands (\"Bad lhs type\"). A {narrow[0]} product is exact in one pass of the "
                    f"MXU: leave its precision unset and keep {single.name} for float32 dots.")
    if f32_bound and "float32" in product.dtypes and _one_bf16_pass(precision):
        return (f"computes a float32 matrix product at {_spelled(precision)}{at}. Rounding in bfloat16 on a "
                f"{chip_name}: the chip runs that product as one bfloat16 pass of its MXU (each operand rounded to "
                f"8 bits of mantissa), {ONE_PASS_ERROR} relative off, far over the float32 bound this call is "
                f"graded to; a CPU computes it in float32, so only the chip would show it. Leave the precision "
                f"unset (the graded calls of float32 inputs run at jax.default_matmul_precision(\"highest\") on "
                f"a TPU) or ask for precision=lax.Precision.HIGHEST; for a bfloat16 product, cast the operands "
                f"to bfloat16 yourself.")
    return None


@functools.cache
def lowering_refuses(precision_name: str) -> bool:
    """Whether the installed JAX's Pallas TPU lowering refuses a float32 kernel dot at this precision,
    read off the lowering itself: JAX 0.10.2 refuses HIGH ("Unsupported dot precision"), JAX 0.11 and
    later lower it to Mosaic's `#tpu.contract_precision<bf16x3>` (three bfloat16 passes), which a
    v5e compiles for float32 operands."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    from ..readers import mosaic

    precision = lax.Precision[precision_name]
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=precision, preferred_element_type=jnp.float32)

    try:
        mosaic.lower_for_tpu(lambda a, b: pl.pallas_call(kernel, out_shape=x)(a, b), x, x)
    except NotImplementedError as error:
        return "Unsupported dot precision" in str(error)
    return False


_KERNEL_PRECISIONS = ("Inside a Pallas kernel a dot runs at DEFAULT (one bfloat16 pass) or HIGHEST (float32): "
                      "ask for precision=lax.Precision.HIGHEST on float32 operands, or leave it unset.")


def _one_bf16_pass(precision) -> bool:
    """Whether a TPU computes a float32 product at this precision in one bfloat16 pass. Unset
    (None) is not: the graded call's own precision applies, HIGHEST on a TPU for float32 inputs."""
    from jax import lax

    if isinstance(precision, tuple):
        return all(p == lax.Precision.DEFAULT for p in precision)
    return getattr(precision, "name", None) in ("BF16_BF16_F32", "BF16_BF16_BF16")


def _spelled(precision) -> str:
    """How a precision reads in a message: "precision DEFAULT", "precision (DEFAULT, HIGHEST)"."""
    if isinstance(precision, tuple):
        names = [getattr(p, "name", str(p)) for p in precision]
        return f"precision {names[0]}" if len(set(names)) == 1 else f"precision ({', '.join(names)})"
    return f"the dot algorithm {getattr(precision, 'name', precision)}"
