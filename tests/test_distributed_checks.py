"""Checks for kernels that span devices: every device's buffer, every DMA mode, the program's shape."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import checks
from pytest_tpucourse.core import jax_internals
from pytest_tpucourse.readers import traced_program
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.core.outcomes import WrongResult


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
        tpu_rules.assert_correct_in_each_dma_mode(graded(None), check)


def test_the_generic_interpreter_is_replaced_by_tpu_interpret_mode_for_dma_checks():
    seen = []
    with pltpu.force_tpu_interpret_mode(True):
        tpu_rules.assert_correct_in_each_dma_mode(
            graded(None), lambda: seen.append(jax_internals.interpret_mode_in_effect()))
    assert [p.dma_execution_mode for p in seen] == ["on_wait", "eager"]


def test_semaphores_left_non_zero_are_read_from_what_the_interpreter_printed():
    printed = "\n".join([
        "Semaphore 2001 has non-zero count for 1 (global core 1) at kernel exit: 4096",
        "Semaphore 0 has non-zero count for 3 (global core 3) at kernel exit: 1",
    ])
    left = jax_internals.semaphores_left_nonzero(printed)
    assert left == [jax_internals.LeftSemaphore(2001, 1, 4096), jax_internals.LeftSemaphore(0, 3, 1, barrier=True)]
    assert [s.scratch_index for s in left] == [1, None]
    assert jax_internals.semaphores_left_nonzero("nothing of the kind") == []
    printed += "\nSemaphore 2001 has non-zero count for 0 (global core 0) at kernel exit: 4096"
    assert jax_internals.left_semaphores_text(jax_internals.semaphores_left_nonzero(printed)) == (
        "scratch semaphore 1 = 4096 on devices 0-1; the barrier semaphore = 1 on device 3")


def _ring_mesh():
    return jax.make_mesh((4,), ("x",), devices=jax.devices()[:4], axis_types=(jax.sharding.AxisType.Auto,))


def _ring(body, *, handshake=True, compiler_params=pltpu.CompilerParams(collective_id=0),
          left=lambda me: lax.rem(me + 3, 4), right=lambda me: lax.rem(me + 1, 4)):
    """A one-kernel ring program over 4 devices whose kernel body is `body(x_ref, o_ref, buf, sems,
    right)`; the handshake signals `left(me)`."""
    def kernel(x_ref, o_ref, buf, sems):
        me = lax.axis_index("x")
        if handshake:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(left(me),))
            pl.semaphore_wait(barrier, 1)
        body(x_ref, o_ref, buf, sems, right(me))

    def per_device(shard):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                              scratch_shapes=[pltpu.VMEM(shard.shape, shard.dtype), pltpu.SemaphoreType.DMA((2,))],
                              compiler_params=compiler_params)(shard)

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
    traced_program.assert_communicates_by_remote_dma(fn, X)
    traced_program.assert_compute_overlaps_communication(fn, X)


@pytest.mark.parametrize("fn, message", [
    (_ring(_send, handshake=False), "starts a remote DMA before any barrier handshake, in a kernel "
                                    "that names its own barrier (collective_id=0)"),
    (_ring(_send, handshake=False, compiler_params=pltpu.CompilerParams(skip_device_barrier=True)),
     "turns off Pallas' default device barrier (skip_device_barrier=True)"),
    (_ring(lambda x_ref, o_ref, buf, sems, right: o_ref.__setitem__(..., x_ref[...])),
     "starts no remote DMA in its 1 pallas_call(s)"),
    (graded(lambda x: jax.shard_map(lambda s: lax.psum(s, "x"), mesh=_ring_mesh(), in_specs=jax.P("x"),
                                    out_specs=jax.P("x"))(x)),
     "lets XLA move the data (psum_invariant outside the kernels)"),
])
def test_communication_that_is_not_a_remote_dma_after_a_handshake_is_named(fn, message):
    with pytest.raises(WrongResult, match=None) as caught:
        traced_program.assert_communicates_by_remote_dma(fn, X)
    assert message in caught.value.message


def test_a_kernel_without_a_barrier_of_its_own_relies_on_the_default_device_barrier():
    """JAX's right_permute_kernel: no collective_id, no handshake; Pallas synchronises the
    devices at the kernel's entry (distributed Pallas guide, "Barrier Semaphores")."""
    fn = _ring(_send, handshake=False, compiler_params=pltpu.CompilerParams())
    traced_program.assert_communicates_by_remote_dma(fn, X)


def test_computing_only_after_the_wait_hides_nothing():
    fn = _ring(functools.partial(_send, compute_while_in_flight=False))
    with pytest.raises(WrongResult, match="never computes while a copy is in flight"):
        traced_program.assert_compute_overlaps_communication(fn, X)


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


# ---------------------------------------------------------------- device_order: orderings proved

def _ring_events(n, *, signal_to, copies=1, credit=False, sems=None):
    """A ring program's events as each device would record them: a barrier handshake (signal
    `signal_to(me)`, wait 1), then `copies` copies right, on receive semaphores `sems(step)`."""
    from pytest_tpucourse.core.jax_internals import DeviceEvent

    sems = sems or (lambda step: 2000 + step)
    events = []
    for me in range(n):
        right, left = (me + 1) % n, (me - 1) % n
        events += [DeviceEvent(0, me, "signal", 0, barrier=True, peer=signal_to(me), value=1),
                   DeviceEvent(0, me, "wait", 0, barrier=True, value=1)]
        for step in range(copies):
            if credit and step:
                events.append(DeviceEvent(0, me, "wait", 3000, value=1))
            events += [DeviceEvent(0, me, "copy", sems(step), peer=right),
                       DeviceEvent(0, me, "copy_wait", sems(step))]
            if credit and step < copies - 1:
                events.append(DeviceEvent(0, me, "signal", 3000, peer=left, value=1))
    return events


def test_a_handshake_with_the_device_written_into_orders_the_copy():
    from pytest_tpucourse.checking import device_order

    assert device_order.problems(_ring_events(4, signal_to=lambda me: (me - 1) % 4)) == []


def test_a_barrier_signal_to_the_wrong_neighbour_is_found_whatever_the_schedule():
    from pytest_tpucourse.checking import device_order

    found = device_order.problems(_ring_events(4, signal_to=lambda me: (me + 1) % 4))
    assert len(found) == 4
    assert found[0].startswith("device 0's copy into device 1 can start before device 1 has entered "
                               "the kernel: before it, device 0 has waited for 1 on its barrier "
                               "semaphore, which the signals of device(s) 3 make up without device 1's")
    # on two devices the wrong neighbour is the right one
    assert device_order.problems(_ring_events(2, signal_to=lambda me: (me + 1) % 2)) == []


def test_a_receive_semaphore_reused_without_a_credit_is_found():
    from pytest_tpucourse.checking import device_order

    in_turn = _ring_events(4, signal_to=lambda me: (me - 1) % 4, copies=3, sems=lambda s: 2000 + s % 2)
    found = device_order.problems(in_turn)
    assert found and found[0].startswith("device 0 starts copy 2 into device 1's receive semaphore")
    credited = _ring_events(4, signal_to=lambda me: (me - 1) % 4, copies=3, sems=lambda s: 2000 + s % 2,
                            credit=True)
    assert device_order.problems(credited) == []
    assert device_order.problems(_ring_events(4, signal_to=lambda me: (me - 1) % 4, copies=3)) == []


def test_a_kernel_without_a_barrier_semaphore_is_left_to_the_default_barrier():
    from pytest_tpucourse.checking import device_order
    from pytest_tpucourse.core.jax_internals import DeviceEvent

    copies = [DeviceEvent(0, me, "copy", 2000, peer=(me + 1) % 4) for me in range(4)]
    assert device_order.problems(copies) == []


def test_the_recording_reads_a_real_kernels_operations():
    """Each device's handshake and copy, read from TPU interpret mode's own objects."""
    fn = _ring(_send)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()), \
            jax_internals.recording_device_events() as events:
        jax.block_until_ready(fn(X))
    ops = sorted({(e.device, e.op, e.barrier, e.peer) for e in events if e.op in ("signal", "copy")})
    assert ops == sorted([(d, "signal", True, (d + 3) % 4) for d in range(4)]
                         + [(d, "copy", False, (d + 1) % 4) for d in range(4)])


# ---------------------------------------------------------------- what a report names


def test_a_device_id_outside_the_mesh_is_named_with_its_fix():
    """lax.rem(me - 1, n) is -1 on device 0: TPU interpret mode signals device n-1 for it (a
    Python index), so the run's values come out right; the device's own operations say -1."""
    fn = _ring(_send, left=lambda me: lax.rem(me - 1, 4))
    with pytest.raises(WrongResult) as raised, tpu_rules.interpret_setting("on_wait", fn):
        jax.block_until_ready(fn(X))
    message = raised.value.render()
    assert raised.value.headline == ("kernel() in test names device -1, which its mesh of 4 devices does not have: "
                                     "a device id must be in 0 .. n-1.")
    assert "device 0 signals the barrier semaphore of device -1 (at " in message
    assert "lax.rem(-1, 4) == -1); write the device k places to the left as lax.rem(me + n - k, n)" in message


def test_a_copy_into_a_device_outside_the_mesh_is_named_not_the_interpreters_key_error():
    # copies to the left, so the barrier signals the right: the device that writes into me
    fn = _ring(_send, right=lambda me: lax.rem(me - 1, 4), left=lambda me: lax.rem(me + 1, 4))
    with pytest.raises(WrongResult) as raised, tpu_rules.interpret_setting("eager", fn):
        jax.block_until_ready(fn(X))
    message = raised.value.render()
    assert "device 0 copies into device -1 (at " in message and "KeyError" not in message, message


def _credit_left_over():
    """Each device signals its left neighbour's REGULAR semaphore `credit`, which nobody waits for."""
    def kernel(x_ref, o_ref, credit):
        pl.semaphore_signal(credit, 1, device_id=(lax.rem(lax.axis_index("x") + 3, 4),))
        o_ref[...] = x_ref[...]

    def per_device(shard):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                              scratch_shapes=[pltpu.SemaphoreType.REGULAR])(shard)

    return graded(jax.shard_map(per_device, mesh=_ring_mesh(), in_specs=jax.P("x"), out_specs=jax.P("x"),
                                check_vma=False))


def test_a_semaphore_left_counting_is_named_by_kind_on_every_device_in_every_setting():
    """Read once every device has ended its kernel: a signal that lands after its receiver's own
    exit counts too, so the devices named do not depend on the thread schedule; and the headline
    is the same whichever setting showed it, so the run's summary says it once."""
    from pytest_tpucourse.grading.messages import same_failure

    fn = _credit_left_over()
    headlines = []
    for setting in ("on_wait", "eager", "races"):
        with pytest.raises(WrongResult) as raised, tpu_rules.interpret_setting(setting, fn, cores=1):
            checks.assert_close(fn(X), np.asarray(X), fn=fn, dtype=np.float32)
        assert raised.value.headline == (
            "kernel() in test ends its kernel with semaphores that are not back at zero: `credit` (a REGULAR "
            "semaphore, scratch semaphore 0) = 1 on devices 0-3."), setting
        assert "A signal nobody waits for leaves a regular semaphore counting" in raised.value.render()
        headlines.append(same_failure(raised.value.headline))
    assert len(set(headlines)) == 1


def test_the_race_detector_names_copies_by_what_they_copy_not_by_the_interpreters_dma_number():
    printed = ("RACE DETECTED\n  write of ('hbm', 101, 3, 0)[(slice(8, 16, None), slice(0, 128, None))] from (111, 0), "
               "all_gather.py:41:8 (kernel)\n  clock: [1]\n  read of ('hbm', 101, 3, 0)[(slice(8, 16, None), "
               "slice(0, 128, None))] from (3, 0), all_gather.py:45:8 (kernel)\n  clock: [2]\n")
    copies = {111: "device 2's copy into device 3 (at all_gather.py:41:8 (kernel))"}
    assert jax_internals.race_summary(printed, copies) == (
        "The race detector saw 1 race; the first: a write and a read of one HBM block [8:16, 0:128] of device 3, "
        "by device 2's copy into device 3 (at all_gather.py:41:8 (kernel)) and core 0 of device 3, neither "
        "ordered before the other.")
    assert "by a copy (the interpreter's DMA 111) and core 0 of device 3" in jax_internals.race_summary(printed)
