"""Graded tests for ch08.blocks: pick_blocks(m, k, n, *, dtype, peak_flops, hbm_bandwidth,
mxu_width, vmem_limit_bytes).

Graded by brute force, on every TPU chip of the course's registry: every legal block
triple that divides the matmul (the (8, 128) rule: bm a multiple of 8, bk and bn of 128,
or the whole dimension) is tried; the pick must be legal and divide, fit the limit (VMEM
by the course's model, pytest_tpucourse.readers.vmem_footprint) and take at most 5% more
roofline time than the least of those that fit. The time counts the MXU's padding of the
block (k and n to its width, m to the rows of one push), so multiples of the MXU width
win where they matter, without being a rule: any legal pick as fast passes.
Shapes include dimensions below the MXU width and below the bf16 tile
(a skinny m of 8), and ones where the biggest blocks lose to the padding (a 128-wide block or
640 = 5 x 128 on a 256-wide MXU), so a count without it fails whichever blocks it prefers; limits run from a chip's whole VMEM down to tight ones where a
footprint mistake picks blocks that do not fit. With the tpu-compile extra, the pick is also
compiled for each chip under the limit it was picked for.
"""

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, tpu, chips, ir

MiB = 2**20
TPUS = [chips.get_chip(name) for name in chips.TPU_CHIPS]
DIMS = (8, 128, 200, 384, 512, 640, 1536, 4096, 8192)
ITEMSIZE = {"bfloat16": 2, "float32": 4}


SUBLANES, LANES = 8, 128


def legal(dim, multiple):
    """Blocks along one dimension that the (8, 128) rule allows and that divide it."""
    return sorted({b for b in range(multiple, dim + 1, multiple) if dim % b == 0} | {dim})


def footprint(bm, bk, bn, dtype):
    """Chapter 11's matmul: x, y and the output double-buffered, a (bm, bn) f32 accumulator."""
    return ir.footprint_bytes([
        ir.Buffer("x", (bm, bk), dtype, 2), ir.Buffer("y", (bk, bn), dtype, 2),
        ir.Buffer("out", (bm, bn), dtype, 2), ir.Buffer("acc", (bm, bn), "float32", 1)])


def mxu_fill(bm, bk, bn, dtype, chip, *, width=None):
    """Useful over padded MACs of one block product: k, n padded to `width` (the chip's MXU
    width), m to a push of 8 sublanes of 32-bit words."""
    up = lambda value, multiple: -(-value // multiple) * multiple  # noqa: E731
    push_rows = SUBLANES * 4 // ITEMSIZE[dtype]
    width = width or chip.mxu_width
    return bm * bk * bn / (up(bm, push_rows) * up(bk, width) * up(bn, width))


def roofline_seconds(m, k, n, bm, bk, bn, dtype, chip, *, width=None):
    """The MXU's padded FLOPs against the HBM bytes of these blocks (width=1: k and n unpadded)."""
    efficiency = mxu_fill(bm, bk, bn, dtype, chip, width=width)
    hbm = ITEMSIZE[dtype] * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    return max(2 * m * k * n / (chip.peak_flops * efficiency), hbm / chip.hbm_bandwidth)


def _padding_cause(m, k, n, picked, best_blocks, dtype, chip):
    """Why a pick loses, where it is the MXU's padding: with k and n unpadded the pick would be
    as fast as the best, and it fills less of the MXU. Empty otherwise."""
    unpadded = roofline_seconds(m, k, n, *picked, dtype, chip, width=1)
    if unpadded > 1.05 * roofline_seconds(m, k, n, *best_blocks, dtype, chip, width=1):
        return ""
    fill, best_fill = mxu_fill(*picked, dtype, chip), mxu_fill(*best_blocks, dtype, chip)
    if fill >= best_fill:
        return ""
    width = chip.mxu_width
    along = lambda b: b / (-(-b // width) * width)  # noqa: E731
    ragged = [f"{name} = {b}" for name, b, other in (("bk", picked[1], best_blocks[1]), ("bn", picked[2], best_blocks[2]))
              if along(b) < along(other)]
    return (f" Charged without the MXU's padding it would look as fast ({_time(unpadded)}), but "
            f"{' and '.join(ragged) or 'its blocks'} pad{'s' if len(ragged) == 1 else ''} to whole "
            f"{width}-wide MXU tiles: it fills {fill:.2f} of the MXU, {best_blocks} {best_fill:.2f}. "
            f"Charge the padded MACs (mxu_efficiency), not the useful ones.")


def _time(seconds):
    """A roofline time in us, or in ns where it is under 0.1 us (a skinny matmul's)."""
    return f"{seconds * 1e6:.1f} us" if seconds >= 1e-7 else f"{seconds * 1e9:.2f} ns"


def _check(impl, chip, m, k, n, dtype, limit):
    fn = impl.blocks.pick_blocks
    note = f"the figures of a {chip.name}"
    width = chip.mxu_width
    kwargs = dict(dtype=dtype, peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth,
                  mxu_width=width, vmem_limit_bytes=limit)
    fits = [b for b in itertools.product(legal(m, SUBLANES), legal(k, LANES), legal(n, LANES))
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
    for name, dim, block, multiple in (("bm", m, bm, SUBLANES), ("bk", k, bk, LANES), ("bn", n, bn, LANES)):
        if block not in legal(dim, multiple):
            checks.fail(fn, f"{fn.display} picked {name}={block} for a dimension of {dim}: a legal block "
                            f"is a multiple of {multiple} (the (8, 128) rule) or the whole dimension, and "
                            f"chapter 11's matmul needs one that divides it ({legal(dim, multiple)}).",
                        note=note)
    needed = footprint(bm, bk, bn, dtype)
    if needed > limit:
        checks.fail(fn, f"{fn.display} picked ({bm}, {bk}, {bn}), which needs {needed:,} bytes of VMEM "
                        f"(x, y and the output twice each, plus the f32 accumulator): more than "
                        f"vmem_limit_bytes={limit:,}.", note=note)
    best_blocks = min(fits, key=lambda b: roofline_seconds(m, k, n, *b, dtype, chip))
    best = roofline_seconds(m, k, n, *best_blocks, dtype, chip)
    got = roofline_seconds(m, k, n, bm, bk, bn, dtype, chip)
    if got > 1.05 * best:
        checks.fail(fn, f"{fn.display} picked ({bm}, {bk}, {bn}) for a {m}x{k}x{n} {dtype} matmul: a "
                        f"roofline time of {_time(got)} (the MXU's padding counted), {got / best:.2f} "
                        f"times the {_time(best)} of {best_blocks}, which fit too; at most 1.05 "
                        f"passes.{_padding_cause(m, k, n, (bm, bk, bn), best_blocks, dtype, chip)}",
                    note=note)


@given(chip=st.sampled_from(TPUS), m=st.sampled_from(DIMS), k=st.sampled_from(DIMS),
       n=st.sampled_from(DIMS), limit=st.sampled_from((1 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, None)))
@example(chip=TPUS[3], m=4096, k=4096, n=4096, limit=16 * MiB)  # v5e, its default scoped limit
@example(chip=TPUS[5], m=8, k=4096, n=8192, limit=32 * MiB)  # v6e, a skinny m below the tile
@example(chip=TPUS[5], m=384, k=1536, n=512, limit=None)  # v6e: 384 is no multiple of 256
@example(chip=TPUS[0], m=8192, k=8192, n=128, limit=None)  # v2: 16 MiB of VMEM, a tall skinny output
@example(chip=TPUS[5], m=4096, k=4096, n=1536, limit=16 * MiB)  # m != n: which operand is re-read matters
@example(chip=TPUS[3], m=512, k=8, n=512, limit=None)  # a contraction of 8: only the whole dimension is legal
@example(chip=TPUS[3], m=8192, k=8192, n=8192, limit=200 * 1024)  # only blocks of fewer than 128 rows fit
@example(chip=TPUS[6], m=1536, k=384, n=384, limit=4 * MiB)  # v7x: (768, 384, 384), no power of two; 384 pads to 512
@example(chip=TPUS[5], m=512, k=384, n=384, limit=1 * MiB)  # v6e: (512, 128, 128), off its MXU's multiples of 256
@example(chip=TPUS[6], m=8, k=384, n=8, limit=None)  # v7x: 8 bf16 rows fill half a push, compute-bound: bk = 384
@example(chip=TPUS[1], m=4096, k=1536, n=512, limit=None)  # v3: every TPU of the registry in every profile
@example(chip=TPUS[2], m=1536, k=4096, n=4096, limit=16 * MiB)  # v4
@example(chip=TPUS[4], m=512, k=8192, n=1536, limit=4 * MiB)  # v5p
# Where the padding decides and the biggest blocks lose: without it, 128-wide blocks look as fast as
# any (the step looks memory-bound) and leave the most room for the others, on a 256-wide MXU.
@example(chip=TPUS[5], m=4096, k=4096, n=384, limit=16 * MiB)  # v6e: bk = 128 fills half of it
@example(chip=TPUS[6], m=640, k=640, n=8, limit=1 * MiB)  # v7x: 640 = 5 x 128 and n = 8, both below a multiple
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


def _near_the_best(got, expected):
    """None when the pick is legal, divides, fits and is within 5% of the best roofline time."""
    m, k, n, dtype, chip_name, limit = expected
    chip = chips.get_chip(chip_name)
    try:
        bm, bk, bn = (int(b) for b in got)
    except (TypeError, ValueError):
        return f"returned {got!r:.80}; expected (bm, bk, bn)"
    for name, dim, block, multiple in (("bm", m, bm, SUBLANES), ("bk", k, bk, LANES), ("bn", n, bn, LANES)):
        if block not in legal(dim, multiple):
            return f"picked {name}={block} for a dimension of {dim}: not a legal block that divides it"
    if footprint(bm, bk, bn, dtype) > limit:
        return f"picked ({bm}, {bk}, {bn}), which needs {footprint(bm, bk, bn, dtype):,} bytes: more than {limit:,}"
    fits = [b for b in itertools.product(legal(m, SUBLANES), legal(k, LANES), legal(n, LANES))
            if footprint(*b, dtype) <= limit]
    best = min(roofline_seconds(m, k, n, *b, dtype, chip) for b in fits)
    mine = roofline_seconds(m, k, n, bm, bk, bn, dtype, chip)
    return None if mine <= 1.05 * best else (f"picked ({bm}, {bk}, {bn}): {mine / best:.2f} times the best "
                                             f"roofline time of the blocks that fit; at most 1.05 passes")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): matmuls, chips and limits the grader
    draws, judged by brute force in the grader's process."""
    cases = []
    while len(cases) < 4:
        chip = TPUS[int(rng.integers(len(TPUS)))]
        m, k, n = (int(rng.choice(DIMS)) for _ in range(3))
        limit = int(rng.choice((1 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, chip.vmem_bytes)))
        dtype = str(rng.choice(("bfloat16", "float32")))
        if not any(footprint(*b, dtype) <= limit
                   for b in itertools.product(legal(m, SUBLANES), legal(k, LANES), legal(n, LANES))):
            continue
        cases.append(checks.trusted.exact(
            "pick_blocks", (m, k, n), kwargs=dict(dtype=dtype, peak_flops=chip.peak_flops,
                                                  hbm_bandwidth=chip.hbm_bandwidth, mxu_width=chip.mxu_width,
                                                  vmem_limit_bytes=limit),
            expected=(m, k, n, dtype, chip.name, limit), compare=_near_the_best,
            label=f"pick_blocks({m}, {k}, {n}) {dtype} on a {chip.name} under {limit:,} bytes"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
