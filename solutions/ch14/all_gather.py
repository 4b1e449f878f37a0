"""Ring all-gather: every device ends with every shard, passed hand to hand around the ring.

One pallas_call per device, inside a shard_map over the ring's mesh axis; no grid, x
and the output in HBM (memory space ANY): nothing is computed, only copied.

Device i first copies its own shard into slot i of its output. Then, in n - 1 steps,
it forwards to its right neighbour the slot it completed last: at step s that is slot
(i - s) mod n, its own shard at step 0 and, later, the one that arrived from its left
neighbour at step s - 1. After n - 1 steps every slot has arrived.

Every step has its own pair of DMA semaphores. A DMA semaphore only counts arrivals:
with one receive semaphore for all steps, a left neighbour that runs a step ahead can
land slot k - 1 while I wait for slot k, my wait returns, and I forward a slot that
has not arrived. A semaphore per step makes each wait mean one particular copy.

The barrier handshake comes first: no device writes into a neighbour that has not
entered the kernel.
"""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def all_gather_kernel(x_ref, o_ref, local_sem, send_sems, recv_sems, *, axis_name):
    me = lax.axis_index(axis_name)
    size = lax.axis_size(axis_name)
    right = lax.rem(me + 1, size)
    left = lax.rem(me + size - 1, size)
    rows = x_ref.shape[0]

    own = pltpu.make_async_copy(x_ref, o_ref.at[pl.ds(me * rows, rows)], local_sem)
    own.start()
    own.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    for step in range(size - 1):
        slot = pl.ds(lax.rem(me - step + size, size) * rows, rows)
        hop = pltpu.make_async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sems.at[step],
                                           recv_sems.at[step], device_id=(right,))
        hop.start()
        hop.wait()  # my slot has left, and the left neighbour's slot of this step has landed


def all_gather(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """x, split along axis 0 over `axis_name`, gathered whole on every device of the ring."""
    size = mesh.shape[axis_name]
    if x.shape[0] % size:
        raise ValueError(f"all_gather: axis 0 of x ({x.shape[0]}) does not split over the "
                         f"{size} devices of axis {axis_name!r}")
    steps = max(size - 1, 1)

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(all_gather_kernel, axis_name=axis_name),
            out_shape=jax.ShapeDtypeStruct((size * shard.shape[0], *shard.shape[1:]), shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((steps,)),
                            pltpu.SemaphoreType.DMA((steps,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)

    return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(),
                         check_vma=False)(x)
