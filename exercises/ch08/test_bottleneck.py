"""Graded tests for ch08.bottleneck: bottleneck(flops, nbytes, *, peak_flops, hbm_bandwidth),
matmul_step(bm, bk, bn, *, k, itemsize), attention_step(block_q, block_kv, head_dim, *,
kv_len, itemsize).

The bound is judged against the course's roofline (pytest_tpucourse.roofline) on every
chip in the registry. A step's cost is judged by summing it over the grid: the steps
must add up to the whole kernel's FLOPs and HBM traffic, counted independently here
(chapter 11's matmul re-reads x once per column block and y once per row block;
chapter 13's forward re-reads k and v once per q block).
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, chips, roofline

ALL_CHIPS = [chips.get_chip(name) for name in chips.KNOWN_CHIPS]


def _pair(fn, out, note=""):
    try:
        first, second = out
    except (TypeError, ValueError):
        checks.fail(fn, f"{fn.display} returned {out!r}; expected a pair.", note=note)
    return first, second


def _close(fn, got, want, what, note=""):
    checks.assert_close(np.float64(got) if isinstance(got, (int, float)) else got, np.float64(want),
                        fn=fn, dtype="float64", what=what, note=note)


@given(chip=st.sampled_from(ALL_CHIPS), intensity=st.floats(0.01, 1e4), nbytes=st.integers(1, 10**12))
@example(chip=chips.get_chip("v5e"), intensity=63.0, nbytes=66560)  # below v5e's ridge of 240
@example(chip=chips.get_chip("v5e"), intensity=1000.0, nbytes=10**6)
@example(chip=chips.get_chip("v5e"), intensity=chips.get_chip("v5e").ridge, nbytes=10**6)  # exactly on the ridge: a tie
def test_bottleneck_against_the_roofline(impl, chip, intensity, nbytes):
    fn = impl.bottleneck.bottleneck
    flops = intensity * nbytes
    note = f"the figures of a {chip.name}"
    unit, factor = _pair(fn, fn(flops, nbytes, peak_flops=chip.peak_flops,
                                hbm_bandwidth=chip.hbm_bandwidth), note)
    want = roofline.predict(chip, roofline.Cost(flops=flops, bytes=nbytes))
    if unit != want.bound:
        on_it = " (exactly on it: a tie is compute-bound)" if want.compute_seconds == want.memory_seconds else ""
        checks.fail(fn, f"{fn.display} says {unit!r}; at {intensity:.4g} FLOP/byte against {chip.name}'s "
                        f"ridge of {chip.ridge:.4g}{on_it} the step is {want.bound}-bound.", note=note)
    slower, faster = sorted((want.compute_seconds, want.memory_seconds), reverse=True)
    _close(fn, factor, slower / faster, "how many times longer the slower unit takes", note)


for _chip in ALL_CHIPS:  # every chip of the registry in every profile: a third of its ridge, and three times it
    for _times in (1 / 3, 3):
        test_bottleneck_against_the_roofline = example(chip=_chip, intensity=_chip.ridge * _times, nbytes=10**6)(
            test_bottleneck_against_the_roofline)


MATMULS = [  # (m, k, n, bm, bk, bn): unequal blocks, a single k step, k steps > 1
    (256, 1024, 384, 128, 256, 384), (512, 512, 512, 512, 128, 256), (128, 4096, 256, 128, 512, 128),
    (1024, 256, 1024, 256, 256, 512),
]


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("m, k, n, bm, bk, bn", MATMULS)
def test_matmul_steps_add_up_to_the_kernel(impl, m, k, n, bm, bk, bn, itemsize):
    fn = impl.bottleneck.matmul_step
    note = f"a step of the {m}x{k}x{n} matmul"
    flops, nbytes = _pair(fn, fn(bm, bk, bn, k=k, itemsize=itemsize), note)
    steps = (m // bm) * (n // bn) * (k // bk)
    _close(fn, flops * steps, 2 * m * k * n, "FLOPs summed over the grid", note)
    traffic = itemsize * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    _close(fn, nbytes * steps, traffic, "HBM bytes summed over the grid (x per column block, y per "
           "row block, the output once)", note)


ATTENTION = [  # (q_len, kv_len, block_q, block_kv, head_dim)
    (1024, 1024, 128, 128, 128), (512, 2048, 256, 512, 64), (2048, 512, 512, 128, 128), (256, 256, 256, 256, 64),
]


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("q_len, kv_len, block_q, block_kv, head_dim", ATTENTION)
def test_attention_steps_add_up_to_the_forward(impl, q_len, kv_len, block_q, block_kv, head_dim, itemsize):
    fn = impl.bottleneck.attention_step
    note = f"a step of one head's forward with q_len {q_len}"
    flops, nbytes = _pair(fn, fn(block_q, block_kv, head_dim, kv_len=kv_len, itemsize=itemsize), note)
    steps = (q_len // block_q) * (kv_len // block_kv)
    _close(fn, flops * steps, 4 * q_len * kv_len * head_dim, "FLOPs summed over one head's grid", note)
    traffic = (itemsize * (2 * q_len * head_dim + 2 * kv_len * head_dim * (q_len // block_q))
               + 4 * q_len)
    _close(fn, nbytes * steps, traffic, "HBM bytes summed over one head's grid (q, out and the f32 "
           "logsumexp once; k and v once per q block)", note)


def _bound_and_factor(got, expected):
    unit, factor = expected
    if not (isinstance(got, (list, tuple)) and len(got) == 2):
        return f"returned {got!r:.80}; expected (unit, factor)"
    if got[0] != unit:
        return f"says {got[0]!r}; the roofline says {unit!r}"
    return checks.trusted.close(rtol=1e-9)(got[1], factor)


def _summed_over(got, expected):
    """None when a step's (flops, bytes) times the grid's steps give the kernel's."""
    steps, flops, traffic = expected
    if not (isinstance(got, (list, tuple)) and len(got) == 2):
        return f"returned {got!r:.80}; expected (flops, bytes)"
    return checks.trusted.close(rtol=1e-9)([got[0] * steps, got[1] * steps], [flops, traffic])


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): intensities, chips, matmuls and
    attention forwards the grader draws."""
    cases = []
    for _ in range(2):
        chip = ALL_CHIPS[int(rng.integers(len(ALL_CHIPS)))]
        intensity, nbytes = float(10 ** rng.uniform(-2, 4)), int(rng.integers(1, 10**12))
        want = roofline.predict(chip, roofline.Cost(flops=intensity * nbytes, bytes=nbytes))
        slower, faster = sorted((want.compute_seconds, want.memory_seconds), reverse=True)
        cases.append(checks.trusted.exact("bottleneck", (intensity * nbytes, nbytes),
                                          kwargs=dict(peak_flops=chip.peak_flops, hbm_bandwidth=chip.hbm_bandwidth),
                                          expected=(want.bound, slower / faster), compare=_bound_and_factor))
    bm, bk, bn = (int(b) for b in rng.choice((128, 256, 512), size=3))
    m, k, n = bm * int(rng.integers(1, 5)), bk * int(rng.integers(1, 5)), bn * int(rng.integers(1, 5))
    itemsize = int(rng.choice((2, 4)))
    cases.append(checks.trusted.exact(
        "matmul_step", (bm, bk, bn), kwargs=dict(k=k, itemsize=itemsize), compare=_summed_over,
        expected=((m // bm) * (n // bn) * (k // bk), 2 * m * k * n,
                  itemsize * (m * k * (n // bn) + k * n * (m // bm) + m * n)),
        label=f"matmul_step({bm}, {bk}, {bn}, k={k}, itemsize={itemsize}) of a {m}x{k}x{n} matmul"))
    block_q, block_kv, head_dim = int(rng.choice((128, 256))), int(rng.choice((128, 512))), int(rng.choice((64, 128)))
    q_len, kv_len = block_q * int(rng.integers(1, 9)), block_kv * int(rng.integers(1, 5))
    cases.append(checks.trusted.exact(
        "attention_step", (block_q, block_kv, head_dim), kwargs=dict(kv_len=kv_len, itemsize=itemsize),
        compare=_summed_over,
        expected=((q_len // block_q) * (kv_len // block_kv), 4 * q_len * kv_len * head_dim,
                  itemsize * (2 * q_len * head_dim + 2 * kv_len * head_dim * (q_len // block_q)) + 4 * q_len),
        label=f"attention_step({block_q}, {block_kv}, {head_dim}, kv_len={kv_len}) with q_len {q_len}"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
