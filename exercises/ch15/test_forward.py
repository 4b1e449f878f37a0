"""Graded tests for ch15.forward: window_forward(q, k, v, *, window, scale, blocks) -> (out, lse).

Values against the float64 oracle at the tolerance rule, on the course's corner cases
(capstone.WINDOW_CASES) and on any further case the manifest enumerates; refusals; and
what values cannot show: only the band's kv blocks are fetched and computed, no
(Sq, Skv) array exists outside the kernel, no race between two cores, and the kernel
lowers for a TPU.
"""

import pytest

from pytest_tpucourse import ir, checks, references, tpu
from pytest_tpucourse.instruments import capstone
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

CASES = capstone.WINDOW_CASES
# Bands of 2-3 blocks of 64: the band axis has steps for two cores to split.
RACE_CASE = capstone._window_case("race", 256, 256, 64, "float32", 64, 64, 100)
# q and kv of different lengths (the fetch check tells them apart by shape).
FETCH_CASES = [CASES[1], capstone._window_case("q shorter, kv blocks smaller", 512, 1024, 64,
                                                "float32", 128, 64, 200)]


def _blocks(impl, case):
    return impl.forward.BlockSizes.resolve()(case.block_q, case.block_kv)


def check_forward(impl, case, reference, seed=0):
    q, k, v = case.arrays(seed)
    blocks = _blocks(impl, case)
    checks.assert_matches_reference(
        impl.forward.window_forward, (q, k, v), kwargs=dict(blocks=blocks, **case.kwargs),
        reference=reference.bind(**case.kwargs), names=("out", "lse"),
        note=f"q, k, v = capstone case ({case}).arrays({seed})")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_lowers_for_tpu(impl, dtype):
    """The default blocks compile for a TPU (Mosaic lowering)."""
    q = tst.random_array((1, 2, 512, 128), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.forward.window_forward, q, q, q, window=256, compile_ahead=True)


def test_forward_lowers_for_tpu_with_small_q_blocks(impl):
    """q blocks under 128 rows (the corner case with blocks the other way round) lower for a TPU too:
    each output's block is one Mosaic takes, lse's included (its last dimension a multiple of 128 or
    the whole array's). Read off the lowering here, so a CPU says what a chip would refuse."""
    case = capstone.SMALL_Q_BLOCKS
    q, k, v = case.arrays(0)
    tpu.assert_lowers_for_tpu(impl.forward.window_forward, q, k, v, blocks=_blocks(impl, case), **case.kwargs)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_matches_oracle(impl, case):
    check_forward(impl, case, references.SLIDING_WINDOW_ATTENTION_WITH_LSE)


# An explicit scale (not the default 1/sqrt(D)), every profile: a kernel that ignores it is off by
# the difference in temperature. Blocks (128, 64), window 160: a band of 2-4 kv blocks a q block.
SCALED = capstone._window_case("an explicit scale, 0.3", 256, 256, 64, "float32", 128, 64, 160)


def test_forward_takes_its_scale(impl):
    q, k, v = SCALED.arrays(0)
    checks.assert_matches_reference(
        impl.forward.window_forward, (q, k, v), kwargs=dict(blocks=_blocks(impl, SCALED), window=160, scale=0.3),
        reference=references.SLIDING_WINDOW_ATTENTION_WITH_LSE.bind(window=160, scale=0.3), names=("out", "lse"),
        note=f"q, k, v = capstone case ({SCALED}).arrays(0)")


def test_forward_manifest_cases(impl):
    """Every further case the manifest enumerates, against the manifest's own oracle."""
    manifest = impl.manifest.manifest()
    for case in capstone.extra_cases(manifest):
        check_forward(impl, case, capstone.reference(manifest))


@pytest.mark.parametrize("q_len, kv_len, window", [(200, 512, 64), (512, 200, 64), (256, 512, 0),
                                                   (512, 256, 64)],
                         ids=["q-not-multiple", "kv-not-multiple", "window-0", "q-longer-than-kv"])
def test_forward_refuses(impl, q_len, kv_len, window):
    """A length the block does not divide, a window below one key, and Sq > Skv are refused
    with a ValueError naming the number."""
    q = tst.random_array((1, 1, q_len, 64), "float32", 0)
    k = tst.random_array((1, 1, kv_len, 64), "float32", 1)
    blocks = impl.forward.BlockSizes.resolve()(128, 128)
    named = str(window) if window < 1 else str(q_len if q_len % 128 or q_len > kv_len else kv_len)
    checks.assert_rejects(
        impl.forward.window_forward, (q, k, k), kwargs=dict(window=window, blocks=blocks),
        error=ValueError, mentions=(named,))


@pytest.mark.parametrize("case", FETCH_CASES, ids=["bq64-bkv128", "bq128-bkv64"])
def test_forward_fetches_only_the_band(impl, case):
    """Every k and v block copied into VMEM holds a key some row of its q block sees."""
    q, k, v = case.arrays(0)
    ir.assert_attention_skips_fetches(
        impl.forward.window_forward, (q, k, v), mask=f"a window of {case.kwargs['window']} keys",
        empty=ir.sliding_window_empty(case.kwargs["window"]),
        advice=ir.BAND_ADVICE,
        kwargs=dict(blocks=_blocks(impl, case), **case.kwargs), note=f"capstone case ({case})")


def test_forward_computes_only_the_band(impl):
    case = FETCH_CASES[1]
    q, k, v = case.arrays(0)
    ir.assert_compute_is_conditional(
        impl.forward.window_forward, (q, k, v), kwargs=dict(blocks=_blocks(impl, case), **case.kwargs),
        why="A step whose kv block lies outside the band must skip its matmuls.",
        note=f"capstone case ({case})")


def test_forward_has_no_score_matrix_in_hbm(impl):
    case = FETCH_CASES[1]
    q, k, v = case.arrays(0)
    ir.assert_no_value_as_large_as(
        impl.forward.window_forward, (q, k, v), elements=case.q_len * case.kv_len,
        what=f"one head's ({case.q_len}, {case.kv_len}) score matrix",
        kwargs=dict(blocks=_blocks(impl, case), **case.kwargs), note=f"capstone case ({case})")


def test_forward_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the parallel axes: the band axis must not be one."""
    case = RACE_CASE
    q, k, v = case.arrays(3)
    tpu.assert_no_races(impl.forward.window_forward, q, k, v, blocks=_blocks(impl, case),
                               **case.kwargs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks."""
    q = tst.random_array((1, 2, 512, 128), dtype, 0)
    tpu.assert_compiles_for(impl.forward.window_forward, q, q, q, window=256)


def _with_blocks(graded, q, k, v, *, block_q, block_kv, **options):
    """window_forward with the tree's own BlockSizes(block_q, block_kv)."""
    import importlib

    blocks = importlib.import_module(".forward", graded.module.load().__package__).BlockSizes(block_q, block_kv)
    return graded(q, k, v, blocks=blocks, **options)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): two of the course's corner cases,
    picked by the grader, on values the tree has never seen (what is fetched and computed, and
    that no score matrix exists, is the tree's own process's to see)."""
    cases = []
    for case in (CASES[int(i)] for i in rng.choice(len(CASES), size=2, replace=False)):
        cases.append(checks.trusted.values(
            "window_forward", case.arrays(checks.trusted.seed(rng)), through=_with_blocks,
            kwargs=dict(block_q=case.block_q, block_kv=case.block_kv, **case.kwargs), names=("out", "lse"),
            reference=references.SLIDING_WINDOW_ATTENTION_WITH_LSE.bind(**case.kwargs), label=f"window_forward({case})"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
