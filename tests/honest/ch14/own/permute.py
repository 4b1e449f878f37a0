"""Exercise ch14.permute, as the distributed Pallas guide's right_permute_kernel: no handshake of
my own, Pallas' default device barrier orders the copy (README: "The barrier")."""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _send_on(src_ref, dst_ref, send_sem, recv_sem, *, axis_name, shift):
    count = lax.axis_size(axis_name)
    target = lax.rem(lax.axis_index(axis_name) + shift % count, count)
    dma = pltpu.make_async_remote_copy(src_ref=src_ref, dst_ref=dst_ref, send_sem=send_sem,
                                       recv_sem=recv_sem, device_id=(target,))
    dma.start()
    dma.wait()


def ring_permute(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x",
                 shift: int = 1) -> jax.Array:
    """Shard i moves to device (i + shift) mod n, by one remote DMA per device."""
    count = mesh.shape[axis_name]
    if x.shape[0] % count != 0:
        raise ValueError(f"ring_permute: {x.shape[0]} rows do not split over {count} devices")
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    kernel = functools.partial(_send_on, axis_name=axis_name, shift=shift)
    one_device = lambda shard: pl.pallas_call(  # noqa: E731
        kernel, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype), in_specs=[hbm], out_specs=hbm,
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2)(shard)
    return jax.shard_map(one_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(axis_name),
                         check_vma=False)(x)
