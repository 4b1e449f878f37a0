"""Ring permute: every device sends its shard to the device `shift` places along the ring.

One pallas_call per device, inside a shard_map over the ring's mesh axis. No grid:
the kernel body runs once, and x and the output stay in HBM (memory space ANY),
because a remote DMA copies HBM to HBM and nothing here is computed.

The schedule:
  1. handshake on the barrier semaphore: tell the device that sends to me (the one
     `shift` places back) that I am inside the kernel, then wait until the device I
     send to has told me the same. A remote DMA into a device that has not entered the
     kernel would land in buffers that still belong to its previous program.
  2. one remote DMA of my shard into the output buffer of the destination device. It
     signals my send semaphore when my buffer has been read, and the destination's
     receive semaphore when its buffer has been written.
  3. wait for both: my send (my input may be freed) and my receive (the shard that the
     device behind me sent has landed in my output).

Device ids are mesh coordinates along the ring's axis, always reduced modulo the ring
size: a negative or too large id addresses no device.
"""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def ring_neighbour(me, offset, size):
    """The device `offset` places from `me` along a ring of `size` devices (offset may be negative)."""
    return lax.rem(me + offset % size, size)


def permute_kernel(x_ref, o_ref, send_sem, recv_sem, *, axis_name, shift):
    me = lax.axis_index(axis_name)
    size = lax.axis_size(axis_name)
    destination = ring_neighbour(me, shift, size)
    source = ring_neighbour(me, -shift, size)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(source,))
    pl.semaphore_wait(barrier, 1)

    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(destination,))
    copy.start()
    copy.wait()


def ring_permute(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x",
                 shift: int = 1) -> jax.Array:
    """Shard i of x (split along axis 0 over `axis_name`) moves to device (i + shift) mod n."""
    size = mesh.shape[axis_name]
    if x.shape[0] % size:
        raise ValueError(f"ring_permute: axis 0 of x ({x.shape[0]}) does not split over the "
                         f"{size} devices of axis {axis_name!r}")

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(permute_kernel, axis_name=axis_name, shift=shift),
            out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard)

    spec = jax.P(axis_name)
    return jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)(x)
