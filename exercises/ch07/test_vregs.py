"""Graded tests for ch07.vregs: vregs(shape, dtype, tiling=None) and padding_waste(...).

Exact answers: an enumeration of the vreg each element lands in, the chapter's worked cases, and,
with the tpu-compile extra, the vreg count Mosaic itself unrolled every value of two real kernels
into (the operands of each value's tpu.roll_vectors after apply-vector-layout).
"""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_tpucourse import checks, public_kernels, tpu

DTYPES = ("float32", "bfloat16", "int8", "int32", "int16")
DTYPE_OF_BITS = {32: "float32", 16: "bfloat16", 8: "int8"}


def packing(dtype) -> int:
    return 4 // np.dtype(dtype).itemsize


def enumerated_vregs(shape, dtype, tiling) -> int:
    """Place every element: tile (r // rows, c // lanes); consecutive tiles along a row share a vreg
    until it is full. Count the vregs that hold at least one element."""
    rows, lanes = tiling or (8 * packing(dtype), 128)
    per_vreg = 8 * 128 * packing(dtype) // (rows * lanes)
    *leading, s, l = shape
    r, c = np.meshgrid(np.arange(s), np.arange(l), indexing="ij")
    occupied = np.unique((r // rows) * (l + 1) + (c // lanes) // per_vreg)
    return math.prod(leading) * occupied.size


@st.composite
def values(draw):
    dtype = draw(st.sampled_from(DTYPES))
    rows_choices = [r for r in (1, 2, 4, 8, 16, 32) if r * 128 <= 1024 * packing(dtype)]
    tiling = draw(st.one_of(st.none(), st.sampled_from([(r, 128) for r in rows_choices])))
    leading = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    return leading + (draw(st.integers(1, 300)), draw(st.integers(1, 700))), dtype, tiling


WORKED = (  # (shape, dtype, tiling, vregs, elements over slots)
    ((128, 1), "float32", None, 16, Fraction(128, 16 * 1024)),  # ch13's m and l: 128 numbers, 16 vregs
    ((128, 128), "float32", None, 16, Fraction(1)),
    ((128, 128), "bfloat16", None, 8, Fraction(1)),  # the native (16, 128) tile
    ((128, 128), "bfloat16", (8, 128), 16, Fraction(1, 2)),  # two (8, 128) tiles per vreg, half used
    ((1, 1, 128, 128), "bfloat16", (8, 128), 16, Fraction(1, 2)),
    ((3, 20, 200), "float32", None, 18, Fraction(3 * 20 * 200, 18 * 1024)),
    ((8, 1), "int8", None, 1, Fraction(8, 4096)),
    ((40, 256), "int8", (8, 128), 5, Fraction(40 * 256, 5 * 4096)),  # (8, 512) per vreg
)


@pytest.mark.parametrize("shape, dtype, tiling, count, used", WORKED, ids=lambda v: str(v))
def test_worked_cases(impl, shape, dtype, tiling, count, used):
    got = impl.vregs.vregs(shape, dtype, tiling=tiling)
    display = impl.vregs.vregs.display
    assert got == count, f"{display}: vregs({shape}, {dtype!r}, {tiling}) returned {got!r}, expected {count}"
    waste = impl.vregs.padding_waste(shape, dtype, tiling=tiling)
    assert math.isclose(waste, float(1 - used), rel_tol=0, abs_tol=1e-12), (
        f"{impl.vregs.padding_waste.display}: padding_waste({shape}, {dtype!r}, {tiling}) returned "
        f"{waste!r}, expected 1 - {used} = {float(1 - used)!r}")


@settings(max_examples=150)  # pure arithmetic: microseconds per example
@given(value=values())
@example(value=((2, 3, 9, 129), "bfloat16", None))
@example(value=((17, 1000), "int8", (8, 128)))
def test_against_an_enumeration_of_where_each_element_lands(impl, value):
    shape, dtype, tiling = value
    want = enumerated_vregs(shape, dtype, tiling)
    got = impl.vregs.vregs(shape, dtype, tiling=tiling)
    assert got == want, f"{impl.vregs.vregs.display}: vregs({shape}, {dtype!r}, {tiling}) returned {got!r}, expected {want}"
    slots = want * 1024 * packing(dtype)
    waste = impl.vregs.padding_waste(shape, dtype, tiling=tiling)
    assert math.isclose(waste, float(1 - Fraction(math.prod(shape), slots)), rel_tol=0, abs_tol=1e-12), (
        f"{impl.vregs.padding_waste.display}: padding_waste({shape}, {dtype!r}, {tiling}) returned {waste!r}")


_COMPILED: dict = {}


def compiled_kernels(request) -> dict:
    """ch11's matmul and ch13's causal forward, bf16, default blocks, through the real v5e compiler
    (once per run; skipped without the tpu-compile extra)."""
    tpu.skip_unless_available()
    if not _COMPILED:
        x = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
        q = jax.ShapeDtypeStruct((1, 2, 512, 128), jnp.bfloat16)
        # as chapters 11 and 13 first write them (the course's specimens: the solutions are tuned since)
        matmul, forward = public_kernels.tiled_matmul, public_kernels.plain_flash_forward
        _COMPILED["ch11 matmul"] = tpu.compile_for(matmul, x, x, chip="v5e", dumps=True).kernel()
        _COMPILED["ch13 forward"] = tpu.compile_for(forward, q, q, q, causal=True, chip="v5e",
                                                            dumps=True).kernel()
    return _COMPILED


@pytest.mark.parametrize("kernel", ["ch11 matmul", "ch13 forward"])
def test_against_the_layouts_mosaic_chose(impl, request, kernel):
    """Every value laid out from offset (0, 0) in a real kernel: the compiler's own vreg count."""
    impl.vregs.vregs((8, 128), "float32")  # a stub is TODO before anything compiles
    laid_out = [v for v in compiled_kernels(request)[kernel].values
                if v.layout.offsets == (0, 0) and v.layout.implicit_dim is None]
    assert laid_out, f"no laid-out values found in {kernel}'s Mosaic dump"
    for value in laid_out:
        dtype = DTYPE_OF_BITS[value.layout.bitwidth]
        got = impl.vregs.vregs(value.shape, dtype, value.layout.tiling)
        assert got == value.vregs, (
            f"{impl.vregs.vregs.display}: vregs({value.shape}, {dtype!r}, {value.layout.tiling}) returned "
            f"{got!r}; Mosaic laid that value of {kernel} out in {value.vregs} vregs "
            f"(#tpu.vpad<\"{value.layout.bitwidth},{{0,0}},{value.layout.tiling}\">)")


def test_the_m_and_l_of_the_flash_forward_take_16_vregs_each(impl, request):
    """The worked case, seen in the compiler: (128, 1) f32 values of ch13's forward, 16 vregs each."""
    got = impl.vregs.vregs((128, 1), "float32")
    columns = [v for v in compiled_kernels(request)["ch13 forward"].values
               if v.shape == (128, 1) and v.layout.offsets == (0, 0)]
    assert columns and all(v.vregs == 16 for v in columns), [v.vregs for v in columns]
    assert got == 16, f"{impl.vregs.vregs.display}: vregs((128, 1), 'float32') returned {got!r}; Mosaic used 16"


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): values the grader draws, against the
    enumeration of where each element lands."""
    cases = []
    for _ in range(6):
        dtype = str(rng.choice(DTYPES))
        rows_choices = [r for r in (1, 2, 4, 8, 16, 32) if r * 128 <= 1024 * packing(dtype)]
        tiling = None if rng.integers(2) else (int(rng.choice(rows_choices)), 128)
        shape = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(0, 3)))) + (
            int(rng.integers(1, 301)), int(rng.integers(1, 701)))
        want = enumerated_vregs(shape, dtype, tiling)
        cases.append(checks.trusted.exact("vregs", (shape, dtype, tiling), expected=want, what="the vreg count"))
        waste = float(1 - Fraction(math.prod(shape), want * 1024 * packing(dtype)))
        cases.append(checks.trusted.exact("padding_waste", (shape, dtype, tiling), expected=waste,
                                          compare=checks.trusted.close(rtol=0, atol=1e-12)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
