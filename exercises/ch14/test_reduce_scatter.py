"""Graded tests for ch14.reduce_scatter: reduce_scatter(x, *, mesh, axis_name)."""

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, ir, tpu
from pytest_tpucourse import strategies as tst

pytestmark = [
    pytest.mark.kernel_timeout(30),
    # Meshes of up to 8 devices, and DMA execution orders and races between devices under TPU interpret
    # mode: on a TPU host with fewer chips every test here runs on 8 CPU devices (grading/placement.py).
    pytest.mark.devices(8),
    pytest.mark.host_interpret("DMA execution orders and races between devices"),
]


# (devices, global shape, dtype): device i holds n chunks of rows; 8 rows per chunk in
# float32 and 16 in bfloat16 (a whole (8,128) / (16,128) tile). Eight devices add eight
# terms: bfloat16 partial sums would round seven times.
CASES = (
    (8, (8 * 8 * 8, 128), "float32"),
    (4, (4 * 4 * 16, 256), "bfloat16"),
    (3, (3 * 3 * 8, 128), "float32"),
)


def check_reduce_scatter(impl, mesh, case, seed, *, kind="normal", axis="x"):
    devices, shape, dtype = case
    kwargs = dict(mesh=mesh(devices, axis=axis), axis_name=axis)
    x = tst.random_array(shape, dtype, seed, kind=kind)
    fn = impl.reduce_scatter.reduce_scatter
    tpu.assert_correct_in_each_dma_mode(fn, lambda: checks.assert_matches_reference(
        fn, (x,), kwargs=kwargs, reference=references.REDUCE_SCATTER.bind(**kwargs)))


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[0], seed=0)
@example(case=CASES[1], seed=1)
@example(case=CASES[2], seed=2)
def test_reduce_scatter_equals_psum_scatter(impl, mesh, case, seed):
    """Every device's chunk of the sum, in both DMA execution modes, against float64 sums."""
    check_reduce_scatter(impl, mesh, case, seed)


def test_reduce_scatter_of_large_values_in_bfloat16(impl, mesh):
    """Eight bfloat16 terms of magnitude 1e4: partial sums rounded at every hop drift. The mesh
    axis is named "ring", passed as axis_name."""
    check_reduce_scatter(impl, mesh, (8, (8 * 8 * 16, 128), "bfloat16"), 3, kind="large", axis="ring")


def test_reduce_scatter_rejects_rows_that_do_not_split_into_chunks(impl, mesh):
    """96 rows over 8 devices: 12 per device, which is not 8 chunks."""
    x = tst.random_array((96, 128), "float32", 0)
    checks.assert_rejects(impl.reduce_scatter.reduce_scatter, (x,), kwargs=dict(mesh=mesh(8)),
                          error=ValueError, mentions=("96",))


def test_reduce_scatter_moves_data_by_remote_dma(impl, mesh):
    """Anti-cheat: remote DMAs after a barrier handshake, no lax.psum_scatter or psum."""
    x = tst.random_array((4 * 4 * 8, 128), "float32", 0)
    ir.assert_communicates_by_remote_dma(impl.reduce_scatter.reduce_scatter, x, mesh=mesh(4))


def test_reduce_scatter_has_no_race(impl, mesh):
    x = tst.random_array((8 * 8 * 8, 128), "float32", 2)
    tpu.assert_no_races(impl.reduce_scatter.reduce_scatter, x, cores=1,
                               why=tpu.RACE_BETWEEN_DEVICES, mesh=mesh(8))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_reduce_scatter_lowers_for_tpu(impl, mesh, dtype):
    x = tst.random_array((4 * 4 * 16, 256), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.reduce_scatter.reduce_scatter, x, mesh=mesh(4))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a case the grader draws, every
    device's buffer judged (that it moves data by remote DMA, has no race and is right in both DMA
    modes is the tree's own process's to see)."""
    cases = []
    for case in (CASES[int(i)] for i in rng.choice(len(CASES), size=2, replace=False)):
        devices, shape, dtype = case
        x = tst.random_array(shape, dtype, checks.trusted.seed(rng), kind=str(rng.choice(["normal", "large"])))
        kwargs = dict(mesh=checks.trusted.mesh(devices), axis_name="x")
        cases.append(checks.trusted.values("reduce_scatter", (x,), kwargs=kwargs,
                                           reference=references.REDUCE_SCATTER.bind(**kwargs)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
