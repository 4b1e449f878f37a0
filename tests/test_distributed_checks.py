"""Checks for kernels that span devices: every device's buffer, every DMA mode, the program's shape."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import checks, jax_internals, structure, tpu_checks
from pytest_tpucourse.outcomes import WrongResult


def graded(function):
    return checks.graded(function, "kernel() in test")


def _replicated(copies):
    """One array, replicated over len(copies) devices, whose buffers hold the given copies."""
    devices = jax.devices()[:len(copies)]
    sharding = jax.sharding.NamedSharding(jax.make_mesh((len(devices),), ("x",), devices=devices), jax.P())
    buffers = [jax.device_put(c, d) for c, d in zip(copies, devices)]
    return jax.make_array_from_single_device_arrays(copies[0].shape, sharding, buffers)


def test_every_devices_copy_of_a_replicated_result_is_graded():
    right = np.arange(16.0, dtype=np.float32).reshape(2, 8)
    checks.assert_close(_replicated([right] * 4), right, fn=graded(None), dtype=np.float32)
    wrong = [right, right, right, right + 1]
    with pytest.raises(WrongResult, match="output on device 3 is wrong"):
        checks.assert_close(_replicated(wrong), right, fn=graded(None), dtype=np.float32)


def test_a_failure_in_one_dma_mode_says_which_and_what_that_mode_hides():
    def check():  # wrong only when copies run as soon as they start
        if jax_internals.interpret_mode_in_effect().dma_execution_mode == "eager":
            raise WrongResult("kernel() in test: output is wrong")

    with pytest.raises(WrongResult, match="dma_execution_mode='eager', which runs a copy the moment it starts"):
        tpu_checks.assert_correct_in_each_dma_mode(graded(None), check)


def test_the_generic_interpreter_is_replaced_by_tpu_interpret_mode_for_dma_checks():
    seen = []
    with pltpu.force_tpu_interpret_mode(True):
        tpu_checks.assert_correct_in_each_dma_mode(
            graded(None), lambda: seen.append(jax_internals.interpret_mode_in_effect()))
    assert [p.dma_execution_mode for p in seen] == ["on_wait", "eager"]


def test_semaphores_left_non_zero_are_condensed_by_device():
    printed = "\n".join([
        "Semaphore 2001 has non-zero count for 1 (global core 1) at kernel exit: 4096",
        "Semaphore 0 has non-zero count for 3 (global core 3) at kernel exit: 1",
        "Semaphore 2001 has non-zero count for 0 (global core 0) at kernel exit: 4096",
        "Semaphore 0 has non-zero count for 2 (global core 2) at kernel exit: 1",
    ])
    assert jax_internals.semaphores_left_nonzero(printed) == (
        "scratch semaphore 1 = 4096 on devices 0-1; the barrier semaphore = 1 on devices 2-3")
    assert jax_internals.semaphores_left_nonzero("nothing of the kind") == ""


def _ring_mesh():
    return jax.make_mesh((4,), ("x",), devices=jax.devices()[:4], axis_types=(jax.sharding.AxisType.Auto,))


def _ring(body, *, handshake=True):
    """A one-kernel ring program over 4 devices whose kernel body is `body(x_ref, o_ref, buf, sems)`."""
    def kernel(x_ref, o_ref, buf, sems):
        me = lax.axis_index("x")
        if handshake:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + 3, 4),))
            pl.semaphore_wait(barrier, 1)
        body(x_ref, o_ref, buf, sems, lax.rem(me + 1, 4))

    def per_device(shard):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                              scratch_shapes=[pltpu.VMEM(shard.shape, shard.dtype), pltpu.SemaphoreType.DMA((2,))],
                              compiler_params=pltpu.CompilerParams(collective_id=0))(shard)

    return graded(jax.shard_map(per_device, mesh=_ring_mesh(), in_specs=jax.P("x"), out_specs=jax.P("x"),
                                check_vma=False))


def _send(x_ref, o_ref, buf, sems, right, *, compute_while_in_flight=True):
    copy = pltpu.make_async_remote_copy(x_ref, buf, sems.at[0], sems.at[1], device_id=(right,))
    copy.start()
    if compute_while_in_flight:
        o_ref[...] = jnp.dot(x_ref[...], x_ref[...].T)[:, :1] * 0 + x_ref[...]
    copy.wait()
    if not compute_while_in_flight:
        o_ref[...] = jnp.dot(x_ref[...], x_ref[...].T)[:, :1] * 0 + x_ref[...]


X = jnp.ones((32, 128), jnp.float32)


def test_a_ring_kernel_with_a_handshake_and_a_remote_copy_passes_the_structure_checks():
    fn = _ring(_send)
    structure.assert_communicates_by_remote_dma(fn, X)
    structure.assert_compute_overlaps_communication(fn, X)


@pytest.mark.parametrize("fn, message", [
    (_ring(_send, handshake=False), "starts a remote DMA before any barrier handshake"),
    (_ring(lambda x_ref, o_ref, buf, sems, right: o_ref.__setitem__(..., x_ref[...])),
     "starts no remote DMA in its 1 pallas_call(s)"),
    (graded(lambda x: jax.shard_map(lambda s: lax.psum(s, "x"), mesh=_ring_mesh(), in_specs=jax.P("x"),
                                    out_specs=jax.P("x"))(x)),
     "lets XLA move the data (psum_invariant outside the kernels)"),
])
def test_communication_that_is_not_a_remote_dma_after_a_handshake_is_named(fn, message):
    with pytest.raises(WrongResult, match=None) as caught:
        structure.assert_communicates_by_remote_dma(fn, X)
    assert message in caught.value.message


def test_computing_only_after_the_wait_hides_nothing():
    fn = _ring(functools.partial(_send, compute_while_in_flight=False))
    with pytest.raises(WrongResult, match="never computes while a copy is in flight"):
        structure.assert_compute_overlaps_communication(fn, X)


def test_waits_are_grouped_by_what_the_devices_wait_for():
    wait = jax_internals.BlockedWait
    waits = [wait(0, "barrier semaphore", 1, 0), wait(1, "barrier semaphore", 1, 0), wait(2, jax_internals.FINISHED),
             wait(3, "barrier semaphore", 1, 0), wait(4, "DMA semaphore", 4096, 0, "permute.py:31", queued=1)]
    assert jax_internals.summary_lines(waits) == [
        "devices 0, 1, 3: waits on a barrier semaphore for 1 (it holds 0)",
        "device 2: finished its kernel and waits for the other devices",
        "device 4: waits on a DMA semaphore for 4096 bytes (it holds 0) at permute.py:31",
    ]
    # a queued copy will run when its semaphore is waited on: that wait is not hopeless
    assert [w.hopeless for w in waits] == [True, True, True, True, False]
