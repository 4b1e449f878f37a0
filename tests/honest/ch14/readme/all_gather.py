"""Exercise ch14.all_gather: n - 1 steps round the ring, one semaphore pair per step."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def all_gather_kernel(x_ref, o_ref, local_sem, send_sems, recv_sems, *, axis_name, n, rows):
    me = lax.axis_index(axis_name)
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)

    own = pltpu.make_async_copy(x_ref, o_ref.at[pl.ds(me * rows, rows)], local_sem)
    own.start()
    own.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    for s in range(n - 1):
        slot = lax.rem(me + n - s, n)
        block = o_ref.at[pl.ds(slot * rows, rows)]
        copy = pltpu.make_async_remote_copy(block, block, send_sems.at[s], recv_sems.at[s], device_id=(right,))
        copy.start()
        copy.wait()


def all_gather(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """x gathered whole on every device of the ring."""
    n = mesh.shape[axis_name]
    if x.shape[0] % n:
        raise ValueError(f"axis 0 of x ({x.shape[0]}) does not divide by {n} devices")
    rows = x.shape[0] // n

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(all_gather_kernel, axis_name=axis_name, n=n, rows=rows),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,)),
                            pltpu.SemaphoreType.DMA((n - 1,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)

    return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(),
                         check_vma=False)(x)
