"""Graded tests for ch08.blocks: pick_blocks(m, k, n, *, dtype, peak_flops, hbm_bandwidth,
mxu_width, vmem_limit_bytes).

Graded by brute force, on every TPU chip of the course's registry: every legal block
triple (multiples of the chip's MXU width dividing the dimension, or the whole
dimension) is tried; the pick must be one of them, fit the limit (VMEM by the course's
model, pytest_tpucourse.readers.vmem_footprint) and be within 5% of the least roofline time of
those that fit. Shapes include dimensions below the MXU width and below the bf16 tile
(a skinny m of 8); limits run from a chip's whole VMEM down to tight ones where a
footprint mistake picks blocks that do not fit. With the tpu-compile extra, the pick is also
compiled for each chip under the limit it was picked for.
"""

import itertools

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, tpu, chips, ir

MiB = 2**20
TPUS = [chips.get_chip(name) for name in chips.TPU_CHIPS]
DIMS = (8, 128, 384, 512, 1536, 4096, 8192)
ITEMSIZE = {"bfloat16": 2, "float32": 4}


def legal(dim, width):
    return sorted({b for b in range(width, dim + 1, width) if dim % b == 0} | {dim})


def footprint(bm, bk, bn, dtype):
    """Chapter 11's matmul: x, y and the output double-buffered, a (bm, bn) f32 accumulator."""
    return ir.footprint_bytes([
        ir.Buffer("x", (bm, bk), dtype, 2), ir.Buffer("y", (bk, bn), dtype, 2),
        ir.Buffer("out", (bm, bn), dtype, 2), ir.Buffer("acc", (bm, bn), "float32", 1)])


def roofline_seconds(m, k, n, bm, bn, dtype, chip):
    hbm = ITEMSIZE[dtype] * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    return max(2 * m * k * n / chip.peak_flops, hbm / chip.hbm_bandwidth)


def _check(impl, chip, m, k, n, dtype, limit):
    fn = impl.blocks.pick_blocks
    note = f"the figures of a {chip.name}"
    width = chip.mxu_width
    kwargs = dict(dtype=dtype, peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth,
                  mxu_width=width, vmem_limit_bytes=limit)
    fits = [(b[0], b[2]) for b in itertools.product(legal(m, width), legal(k, width), legal(n, width))
            if footprint(*b, dtype) <= limit]
    if not fits:
        checks.assert_rejects(fn, (m, k, n), kwargs=kwargs, error=ValueError,
                              mentions=("vmem_limit_bytes",), note=f"{note}: no legal blocks fit")
        return
    picked = fn(m, k, n, **kwargs)
    try:
        bm, bk, bn = (int(b) for b in picked)
    except (TypeError, ValueError):
        checks.fail(fn, f"{fn.display} returned {picked!r}; expected (bm, bk, bn).", note=note)
    for name, dim, block in (("bm", m, bm), ("bk", k, bk), ("bn", n, bn)):
        if block not in legal(dim, width):
            checks.fail(fn, f"{fn.display} picked {name}={block} for a dimension of {dim}: blocks are "
                            f"multiples of the {width}-wide MXU that divide it, or the whole "
                            f"dimension ({legal(dim, width)}).", note=note)
    needed = footprint(bm, bk, bn, dtype)
    if needed > limit:
        checks.fail(fn, f"{fn.display} picked ({bm}, {bk}, {bn}), which needs {needed:,} bytes of VMEM "
                        f"(x, y and the output twice each, plus the f32 accumulator): more than "
                        f"vmem_limit_bytes={limit:,}.", note=note)
    best = min(roofline_seconds(m, k, n, a, c, dtype, chip) for a, c in fits)
    checks.assert_close(np.float64(roofline_seconds(m, k, n, bm, bn, dtype, chip)), best,
                        fn=fn, dtype="float64", tol=0.05,
                        what=f"roofline time of the picked blocks ({bm}, {bk}, {bn}) against the best that fits",
                        note=note)


@given(chip=st.sampled_from(TPUS), m=st.sampled_from(DIMS), k=st.sampled_from(DIMS),
       n=st.sampled_from(DIMS), limit=st.sampled_from((1 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, None)))
@example(chip=TPUS[3], m=4096, k=4096, n=4096, limit=16 * MiB)  # v5e, its default scoped limit
@example(chip=TPUS[5], m=8, k=4096, n=8192, limit=32 * MiB)  # v6e, a skinny m below the tile
@example(chip=TPUS[5], m=384, k=1536, n=512, limit=None)  # v6e: 384 is no multiple of 256
@example(chip=TPUS[0], m=8192, k=8192, n=128, limit=None)  # v2: 16 MiB of VMEM, a tall skinny output
@example(chip=TPUS[5], m=4096, k=4096, n=1536, limit=16 * MiB)  # m != n: which operand is re-read matters
def test_pick_is_legal_fits_and_is_near_the_best(impl, chip, m, k, n, limit):
    _check(impl, chip, m, k, n, "bfloat16", chip.vmem_bytes if limit is None else limit)


# Tight limits, set where a footprint mistake changes the pick: what fits only by the
# model's own count (padding, two buffers, the accumulator) decides.
TIGHT = [
    (8, 512, 512, "bfloat16", footprint(8, 128, 128, "bfloat16")),  # 8 bf16 rows pad to 8, not 16
    (1024, 1024, 1024, "bfloat16", footprint(1024, 128, 512, "bfloat16")),  # two buffers per block
    (2048, 2048, 2048, "bfloat16", footprint(512, 128, 1024, "bfloat16")),  # the accumulator counts
    (1024, 2048, 2048, "float32", footprint(1024, 128, 1024, "float32") - 1),  # one byte short
]


@pytest.mark.parametrize("m, k, n, dtype, limit", TIGHT)
def test_pick_under_a_tight_limit(impl, m, k, n, dtype, limit):
    _check(impl, chips.get_chip("v5e"), m, k, n, dtype, limit)


def test_refuses_when_nothing_fits(impl):
    v5e = chips.get_chip("v5e")
    checks.assert_rejects(
        impl.blocks.pick_blocks, (512, 512, 512),
        kwargs=dict(dtype="bfloat16", peak_flops=v5e.peak_flops, hbm_bandwidth=v5e.hbm_bandwidth,
                    mxu_width=128, vmem_limit_bytes=64 * 1024),
        error=ValueError, mentions=("vmem_limit_bytes",), note="the smallest legal blocks need 256 KiB")


# One shape per chip, compiled (libtpu 0.0.42.1) with vmem_limit_bytes set to the limit the
# blocks were picked for. The compiler takes a kernel that needs exactly its limit (measured on
# all five chips) and refuses one that needs 1 KiB more. Each limit is the footprint of blocks
# that fit, set where a count without the second buffer or without the accumulator picks blocks
# one size larger ((128, 128, 256) for (128, 128, 128); (256, 256, 512) for (256, 256, 256)).
COMPILED = [
    ("v5e", 1024, 1024, 1024, footprint(128, 256, 128, "bfloat16")),
    ("v5p", 1024, 1024, 1024, footprint(128, 256, 128, "bfloat16")),
    ("v4", 1024, 1024, 1024, footprint(128, 256, 128, "bfloat16")),
    ("v6e", 1024, 1024, 1024, footprint(256, 512, 256, "bfloat16")),
    ("v7x", 1024, 1024, 1024, footprint(256, 512, 256, "bfloat16")),
]


@pytest.mark.parametrize("name, m, k, n, limit", COMPILED, ids=[c[0] for c in COMPILED])
def test_picked_blocks_compile_under_the_limit(impl, name, m, k, n, limit):
    chip = chips.get_chip(name)
    fn = impl.blocks.pick_blocks
    picked = fn(m, k, n, dtype="bfloat16", peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth,
                mxu_width=chip.mxu_width, vmem_limit_bytes=limit)
    tpu.skip_unless_available()
    tpu.assert_blocks_compile(
        fn, tuple(int(b) for b in picked), m, k, n, dtype="bfloat16", chip=name, vmem_limit_bytes=limit,
        note=f"compiled for {name}")
