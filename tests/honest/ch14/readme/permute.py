"""Exercise ch14.permute: the README's handshake on the barrier semaphore, then one remote DMA."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def permute_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name, shift):
    me = lax.axis_index(axis_name)
    n = lax.axis_size(axis_name)
    destination = lax.rem(me + shift % n, n)
    source = lax.rem(me + n - shift % n, n)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(source,))  # "I am in"
    pl.semaphore_wait(barrier, 1)                          # "so is destination"

    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(destination,))
    copy.start()
    copy.wait()


def ring_permute(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x",
                 shift: int = 1) -> jax.Array:
    """Shard i of x moves to device (i + shift) mod n."""
    n = mesh.shape[axis_name]
    if x.shape[0] % n:
        raise ValueError(f"axis 0 of x ({x.shape[0]}) does not divide by {n} devices")

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(permute_kernel, axis_name=axis_name, shift=shift),
            out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)

    return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(axis_name),
                         check_vma=False)(x)
