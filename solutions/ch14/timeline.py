"""The semaphore timeline: a schedule simulated round by round, and the pair exchange that hung.

`simulate` plays one program of operations per device (pytest_tpucourse.instruments.semaphore_timeline's
Signal, Wait, DmaStart and DmaWait) under the rules of the chapter's README: in each
round every device tries its next operation; signals and DMA starts always run, and
what they add arrives at the start of the next round; a wait runs only on what its
semaphore held when the round began, and takes it. A round in which nothing runs
while work is left is a deadlock, and nothing can ever change after it.

`pair_exchange` swaps the shards of devices 0 and 1, 2 and 3, ... with one remote
DMA each. As shipped, each device waited for its partner's barrier signal before
sending its own: both partners waited, neither signalled, and the kernel hung. The
simulator shows it (`tpucourse timeline exchange-deadlock`); the fix is the order of
two lines: signal first, then wait.
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
    """Play a schedule (one list of operations per device); its Timeline, deadlocked or not."""
    programs = [list(program) for program in programs]
    for device, program in enumerate(programs):
        for step, op in enumerate(program):
            target = getattr(op, "device", None)
            if target is not None and not 0 <= target < len(programs):
                raise ValueError(f"device {device}, step {step}: {op} names device {target}; the "
                                 f"schedule has {len(programs)} devices")
    held = collections.Counter()  # (device, semaphore) -> count
    next_op = [0] * len(programs)
    ran_at = [[] for _ in programs]
    now = 0
    while True:
        busy = [d for d, program in enumerate(programs) if next_op[d] < len(program)]
        if not busy:
            return Timeline(tuple(map(tuple, ran_at)), None, _nonzero(held))
        arrivals = collections.Counter()
        progressed = False
        for device in busy:
            op = programs[device][next_op[device]]
            if isinstance(op, (Wait, DmaWait)):
                needed = op.value if isinstance(op, Wait) else 1
                if held[(device, op.sem)] < needed:
                    continue  # blocked: try again next round
                held[(device, op.sem)] -= needed
            elif isinstance(op, Signal):
                arrivals[(device if op.device is None else op.device, op.sem)] += op.inc
            elif isinstance(op, DmaStart):
                arrivals[(device, op.send)] += 1
                arrivals[(op.device, op.recv)] += 1
            ran_at[device].append(now)
            next_op[device] += 1
            progressed = True
        if not progressed:
            stuck = busy[0]
            op = programs[stuck][next_op[stuck]]
            wants = op.value if isinstance(op, Wait) else 1
            deadlock = Deadlock(stuck, next_op[stuck], op.sem, wants, held[(stuck, op.sem)])
            return Timeline(tuple(map(tuple, ran_at)), deadlock, _nonzero(held))
        held.update(arrivals)
        now += 1


def _nonzero(held):
    return tuple(sorted((device, sem, count) for (device, sem), count in held.items() if count))


def exchange_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name):
    me = lax.axis_index(axis_name)
    partner = lax.bitwise_xor(me, 1)  # 0 <-> 1, 2 <-> 3, ...
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(partner,))
    pl.semaphore_wait(barrier, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(partner,))
    copy.start()
    copy.wait()


def pair_exchange(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """Devices 2k and 2k + 1 swap their shards of x (split along axis 0 over `axis_name`)."""
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
