"""Exercise ch14.all_gather: the output as n slots, a fori_loop over the n - 1 ring steps."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _ring_gather(shard_ref, slots_ref, own_sem, send_sems, recv_sems, *, axis_name, devices):
    me = lax.axis_index(axis_name)
    to_right = lax.rem(me + 1, devices)
    from_left = lax.rem(me + devices - 1, devices)

    mine = pltpu.make_async_copy(shard_ref, slots_ref.at[me], own_sem)
    mine.start()
    mine.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(from_left,))  # from_left may now write into me
    pl.semaphore_wait(barrier, 1)                            # to_right is in the kernel too

    def forward(step, carry):
        slot = lax.rem(me + devices - step, devices)  # the slot I completed last
        hop = pltpu.make_async_remote_copy(slots_ref.at[slot], slots_ref.at[slot], send_sems.at[step],
                                           recv_sems.at[step], device_id=(to_right,))
        hop.start()
        hop.wait()
        return carry

    lax.fori_loop(0, devices - 1, forward, 0)


def all_gather(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """Every device ends with all of x."""
    devices = mesh.shape[axis_name]
    if x.shape[0] % devices:
        raise ValueError(f"all_gather: axis 0 ({x.shape[0]}) does not divide by {devices}")
    shard_shape = (x.shape[0] // devices, *x.shape[1:])

    def one_device(shard):
        slots = pl.pallas_call(
            functools.partial(_ring_gather, axis_name=axis_name, devices=devices),
            out_shape=jax.ShapeDtypeStruct((devices, *shard_shape), x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] + [pltpu.SemaphoreType.DMA((devices - 1,))] * 2,
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)
        return slots.reshape(x.shape)

    return jax.shard_map(one_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(),
                         check_vma=False)(x)
