"""Graded tests for ch07.mxu: vmatmuls_per_step(bm, bk, bn, chip), against the compiler's bundles.

Each case compiles ch11's matmul (the shipped solution, bf16) with the real compiler for the chip
and counts the vmatmul instructions in one grid step of its final LLO bundles: static code, not
time. Needs the tpu-compile extra; skipped (after a TODO check) without it.
"""

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import public_kernels, tpu

# (bm, bk, bn): square blocks at both MXU widths, an unequal block, and a 128-deep block on the
# 256-wide MXU (the case that packs two row groups into one push).
BLOCKS = ((128, 128, 128), (256, 256, 256), (128, 256, 512), (256, 128, 128))
CHIPS = ("v5e", "v6e")


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: "x".join(map(str, b)))
def test_vmatmuls_per_grid_step(impl, request, chip, blocks):
    bm, bk, bn = blocks
    predicted = impl.mxu.vmatmuls_per_step(bm, bk, bn, chip)
    tpu.skip_unless_available()
    x = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    matmul = public_kernels.course_solution(request.path, "ch11.matmul.matmul")
    kernel = tpu.compile_for(matmul, x, x, chip=chip, dumps=True, bm=bm, bk=bk, bn=bn).kernel()
    assert predicted == kernel.step_mxu_ops, (
        f"{impl.mxu.vmatmuls_per_step.display}: vmatmuls_per_step({bm}, {bk}, {bn}, {chip!r}) returned "
        f"{predicted!r}; the {chip} compiler's bundles for ch11's matmul at these blocks issue "
        f"{kernel.step_mxu_ops} vmatmul per grid step ({kernel.step_bundles} bundles per step)")
