"""Graded tests for ch14.all_gather: all_gather(x, *, mesh, axis_name)."""

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


# (devices, global shape, dtype): the output is replicated, and every device's copy is
# graded. Each device's copy stays under 64 KiB (README, "How your kernels run here").
CASES = (
    (8, (64, 128), "float32"),
    (4, (64, 256), "bfloat16"),
    (3, (24, 128), "int32"),
)


def check_all_gather(impl, mesh, case, seed, axis="x"):
    devices, shape, dtype = case
    kwargs = dict(mesh=mesh(devices, axis=axis), axis_name=axis)
    x = tst.random_array(shape, dtype, seed, scale=100.0 if dtype == "int32" else 1.0)
    fn = impl.all_gather.all_gather
    tpu.assert_correct_in_each_dma_mode(fn, lambda: checks.assert_matches_reference(
        fn, (x,), kwargs=kwargs, reference=references.ALL_GATHER.bind(**kwargs)))


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[0], seed=0)
@example(case=CASES[1], seed=1)
@example(case=CASES[2], seed=2)
def test_all_gather_equals_lax_all_gather(impl, mesh, case, seed):
    """Every device's gathered copy, in both DMA execution modes, against x itself."""
    check_all_gather(impl, mesh, case, seed)


@pytest.mark.parametrize("shape", [(256,), (4, 4, 128)], ids=["rank-1", "rank-3"])
def test_all_gather_of_two_devices(impl, mesh, shape):
    """One step: each device forwards only its own shard. x may have any rank: a vector and a
    rank-3 array here, matrices in the cases above; and the mesh axis is named "ring", passed as
    axis_name."""
    check_all_gather(impl, mesh, (2, shape, "float32"), 1, axis="ring")


def test_all_gather_moves_data_by_remote_dma(impl, mesh):
    """Anti-cheat: remote DMAs after a barrier handshake, no lax.all_gather."""
    x = tst.random_array((32, 128), "float32", 0)
    ir.assert_communicates_by_remote_dma(impl.all_gather.all_gather, x, mesh=mesh(4))


def test_all_gather_has_no_race(impl, mesh):
    x = tst.random_array((64, 128), "float32", 2)
    tpu.assert_no_races(impl.all_gather.all_gather, x, cores=1, why=tpu.RACE_BETWEEN_DEVICES,
                               mesh=mesh(8))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_gather_lowers_for_tpu(impl, mesh, dtype):
    x = tst.random_array((64, 256), dtype, 0)
    tpu.assert_lowers_for_tpu(impl.all_gather.all_gather, x, mesh=mesh(4))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a case the grader draws, every
    device's buffer judged (that it moves data by remote DMA, has no race and is right in both DMA
    modes is the tree's own process's to see)."""
    cases = []
    for case in (CASES[int(i)] for i in rng.choice(len(CASES), size=2, replace=False)):
        devices, shape, dtype = case
        x = tst.random_array(shape, dtype, checks.trusted.seed(rng), scale=100.0 if dtype == "int32" else 1.0)
        kwargs = dict(mesh=checks.trusted.mesh(devices), axis_name="x")
        cases.append(checks.trusted.values("all_gather", (x,), kwargs=kwargs,
                                           reference=references.ALL_GATHER.bind(**kwargs)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
