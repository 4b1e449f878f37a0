"""Graded tests for ch06.double_buffering: column_sums(x, *, block_rows) by manual DMA.

No single TPU interpret setting catches the classic DMA mistakes, so every case runs
under three (pytest_tpucourse.checking.tpu_rules.DMA_SETTINGS): copies executed only when
waited for (a read before its wait sees NaN), copies executed at once (a copy never
waited for leaves its semaphore counting at kernel exit), and the race detector on two
simulated cores (a slot read while a copy into it may still run). A wait that nothing
signals ends at the kernel deadline (--kernel-timeout) as a failure, not a hang.
"""

import pytest

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

# (M, N, block_rows, dtype)
CASES = (
    (48, 384, 16, "bfloat16"),  # 3 blocks: the last one lands in slot 0 again
    (6, 128, 8, "float32"),  # fewer rows than one block: a single copy
    (32, 256, 8, "float32"),  # 4 blocks, an even count: the last one lands in slot 1
)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_column_sums_lowers_for_tpu(impl, dtype):
    x = tst.random_array((256, 512), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.double_buffering.column_sums, x, block_rows=16, compile_ahead=True)


@pytest.mark.parametrize("setting", tpu.DMA_SETTINGS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}/{c[2]}-{c[3]}")
def test_column_sums_under_every_dma_setting(impl, case, setting):
    m, n, block_rows, dtype = case
    x = tst.random_array((m, n), dtype, 0, offset=1.0)
    fn = impl.double_buffering.column_sums
    with tpu.interpret_setting(setting, fn):
        checks.assert_matches_reference(
            fn, (x,), kwargs=dict(block_rows=block_rows), reference=references.SUM_LEADING_AXIS,
            note=f"inside `with tpu.interpret_setting({setting!r}):`")


def test_column_sums_starts_the_next_copy_before_waiting(impl):
    x = tst.random_array((48, 384), "bfloat16", 0)
    tpu.assert_prefetches(impl.double_buffering.column_sums, x, block_rows=16)


def test_column_sums_refuses_rows_the_blocks_do_not_divide(impl):
    x = tst.random_array((20, 128), "float32", 0)
    checks.assert_rejects(impl.double_buffering.column_sums, (x,), kwargs=dict(block_rows=8),
                          error=ValueError, mentions=("20", "8"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_column_sums_compiles_for_v5e(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) at the lowering test's call."""
    x = tst.random_array((256, 512), dtype, 0)
    tpu.assert_compiles_for(impl.double_buffering.column_sums, x, chip="v5e", block_rows=16)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a case and a row count the grader
    draws (the DMA settings, the prefetch and the compile are the tree's own process's to see)."""
    m, n, block_rows, dtype = CASES[int(rng.integers(len(CASES)))]
    blocks = int(rng.integers(1, 7))
    x = tst.random_array((block_rows * blocks, n), dtype, checks.trusted.seed(rng), offset=1.0)
    return [checks.trusted.values("column_sums", (x,), kwargs=dict(block_rows=block_rows),
                                  reference=references.SUM_LEADING_AXIS)]


TRUSTED = checks.trusted.Cases(_trusted_cases)
