"""Graded tests for ch11.matmul: matmul(x, y, *, bm, bk, bn)."""

import jax
import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, ir, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

# (M, K, N, blocks). In every case bm, bk and bn differ (after clamping), so a
# BlockSpec or grid extent that uses one block size where another belongs (y's block
# as (bn, bk)) shows. K spans several k steps in two cases, so an accumulator that is
# not initialised, not kept in f32, or run on a "parallel" k axis shows. Each
# dimension is above, below or equal to its block somewhere: a grid taken before the
# blocks are clamped (M // bm = 0 when M < bm) runs no step at all.
CASES = (
    (128, 1024, 256, dict(bm=64, bk=256, bn=128)),  # every dimension above its block: 2 x 2 x 4 grid
    (32, 64, 384, dict(bm=128, bk=128, bn=128)),  # M, K below (clamped to 32, 64): 1 x 3 x 1 grid
    (256, 512, 384, dict(bm=256, bk=128, bn=384)),  # M, N equal to their blocks, 4 k steps
)
RACE_CASE = (128, 1024, 384, dict(bm=128, bk=256, bn=128))  # a 1 x 3 x 4 grid
# The TPU checks run the default blocks (1024, the gate's) at a 2 x 2 x 2 grid: every block is then
# double-buffered, as at the gate's 4096³, so the scoped VMEM the compiler checks is the gate's.
# Only shapes: nothing that size is allocated.
GATE_BLOCKS_SHAPE = (2048, 2048)


def _at_gate_blocks(dtype):
    return jax.ShapeDtypeStruct(GATE_BLOCKS_SHAPE, dtype)


def _check(impl, case, dtype, seed):
    m, k, n, blocks = case
    x = tst.random_array((m, k), dtype, seed)
    y = tst.random_array((k, n), dtype, seed + 1)
    checks.assert_matches_reference(
        impl.matmul.matmul, (x, y), kwargs=blocks, reference=references.MATMUL)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_lowers_for_tpu(impl, dtype):
    x = _at_gate_blocks(dtype)
    tpu.assert_lowers_for_tpu(impl.matmul.matmul, x, x)


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[0], seed=0)
@example(case=CASES[1], seed=0)
@example(case=CASES[2], seed=1)
def test_matmul_f32(impl, case, seed):
    _check(impl, case, "float32", seed)


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[2], seed=0)
@example(case=CASES[0], seed=1)
@example(case=CASES[1], seed=1)
def test_matmul_bf16_accumulates_in_f32(impl, case, seed):
    _check(impl, case, "bfloat16", seed)


def test_matmul_walks_k_in_bk_steps(impl):
    """One grid step per (bm, bk) block of x and (bk, bn) block of y: K is walked in K/bk steps.
    A kernel that takes all of K in one step gives right values wherever VMEM holds whole
    rows of x and columns of y; its grid shows it. Read off the traced program: no compile."""
    m, k, n, blocks = CASES[0]
    x = tst.random_array((m, k), "float32", 0)
    y = tst.random_array((k, n), "float32", 1)
    ir.assert_grid_steps(
        impl.matmul.matmul, (x, y), kwargs=blocks,
        extents={"M/bm": m // blocks["bm"], "N/bn": n // blocks["bn"], "K/bk": k // blocks["bk"]},
        why="bk sets how much of K one step holds in VMEM: all of K at once is (bm, K) and (K, bn) "
            "blocks, which at the default 128 and K = 8192 in f32 take 8 MiB, 16 MiB double-buffered: "
            "more than a v5e's scoped VMEM with the output's blocks added.",
        note=f"M={m}, K={k}, N={n}, " + ", ".join(f"{b}={v}" for b, v in blocks.items()))


def test_matmul_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the parallel axes: the k axis must not be one of them.
    A grid of 1 x 3 x 4: the parallel extents before k multiply to an odd number, so the
    split between the cores falls inside the k steps of one output block. The same call's
    values are checked too: one compiled program for both."""
    with tpu.checking_races(impl.matmul.matmul):
        _check(impl, RACE_CASE, "float32", 0)


def test_matmul_is_one_kernel(impl):
    x = tst.random_array((128, 256), "bfloat16", 0)
    checks.assert_one_kernel(impl.matmul.matmul, x, x.T, bm=128, bk=128, bn=128)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks where each is
    double-buffered, scoped VMEM included: what gate 01 runs at 4096³. A program compiled before
    (tpu-compiles/) is read, not compiled again; in the learner's edit loop a new program compiles
    after the run has answered and the next run gives its verdict (assert_compiles_for, answer_later)."""
    x = _at_gate_blocks(dtype)
    tpu.assert_compiles_for(impl.matmul.matmul, x, x, answer_later=True)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): every case's shape and blocks, each in
    a dtype drawn for it, on values the tree has never seen."""
    cases = []
    for m, k, n, blocks in CASES:
        dtype, seed = str(rng.choice(tst.DTYPES)), checks.trusted.seed(rng)
        x, y = tst.random_array((m, k), dtype, seed), tst.random_array((k, n), dtype, seed + 1)
        cases.append(checks.trusted.values("matmul", (x, y), kwargs=blocks, reference=references.MATMUL))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
