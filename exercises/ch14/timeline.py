"""Exercise ch14.timeline: the semaphore timeline (README: "The semaphore timeline").

Two parts. First write simulate(programs): play a schedule of Signal, Wait, DmaStart
and DmaWait operations, one list per device, round by round, and return its Timeline
or its deadlock. Then use it (or `tpucourse timeline exchange-deadlock`) on the
kernel below, pair_exchange, which hangs as shipped, and fix the kernel.
"""

import collections
import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.instruments.semaphore_timeline import (
    Deadlock,
    DmaStart,
    DmaWait,
    Signal,
    Timeline,
    Wait,
)


def simulate(programs) -> Timeline:
    """Play a schedule (one list of operations per device); its Timeline, deadlocked or not.

    programs[d] is device d's list of Signal / Wait / DmaStart / DmaWait (from
    pytest_tpucourse.instruments.semaphore_timeline). Rounds 0, 1, 2, ...: in each, every device with
    operations left tries its next one, devices in order. Signal(sem, device, inc)
    and DmaStart(device, send, recv) always run; what they add (inc to `sem` of
    `device`, or of this device when device is None; 1 to this device's `send` and
    1 to `device`'s `recv`) is added after the round, visible from the next one.
    Wait(sem, value) and DmaWait(sem) (value 1) run only if this device's `sem` held
    at least `value` when the round began; running takes `value` away at once. A
    device that cannot run its wait tries again next round.

    Return Timeline(rounds, deadlock, leftover): rounds[d] the tuple of rounds in which
    device d ran its operations, in order (only those it ran); deadlock None if every
    device ran everything, else, for the first round in which no device could run
    anything, Deadlock(device, step, sem, wants, holds) of the lowest-numbered device
    still blocked (step: the index of its blocked operation); leftover: the sorted
    tuple of (device, sem, count) of every semaphore not at zero at the end.
    Raise ValueError naming the device if an operation addresses a device outside the
    schedule. Do not call pytest_tpucourse.instruments.semaphore_timeline.run: it is withheld while graded.
    """
    raise NotImplementedError("write simulate(): rounds of signals, waits and DMAs until everyone "
                              "finishes or no one can move")


def exchange_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    """The pair exchange's kernel, shipped as it is: run it, predict what happens with
    simulate(), then fix it (the README's "the deadlock on purpose")."""
    me = lax.axis_index(axis_name)
    partner = lax.bitwise_xor(me, 1)  # 0 <-> 1, 2 <-> 3, ...
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_wait(barrier, 1)  # wait until my partner is in the kernel ...
    pl.semaphore_signal(barrier, 1, device_id=(partner,))
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(partner,))
    copy.start()
    copy.wait()


def pair_exchange(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """Devices 2k and 2k + 1 swap their shards of x (split along axis 0 over `axis_name`).

    As shipped this kernel hangs: find out why with your simulator, then fix it. It
    must equal lax.ppermute(shard, axis_name, [(i, i ^ 1) for i in range(n)]).
    """
    size = mesh.shape[axis_name]
    if size % 2 or x.shape[0] % size:
        raise ValueError(f"pair_exchange needs an even number of devices and axis 0 of x ({x.shape[0]}) "
                         f"split over them; axis {axis_name!r} has {size}")

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(exchange_kernel, axis_name=axis_name),
            out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)

    spec = jax.P(axis_name)
    return jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)(x)
