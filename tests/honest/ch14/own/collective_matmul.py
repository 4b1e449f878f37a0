"""Exercise ch14.collective_matmul: two chunk buffers, credits from the left neighbour's side."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _gather_and_multiply(x_ref, w_ref, out_ref, chunks, sends, recvs, free_buffer, *, axis_name, ring):
    me = lax.axis_index(axis_name)
    right, left = lax.rem(me + 1, ring), lax.rem(me + ring - 1, ring)
    chunks[0] = x_ref[...]  # my own chunk is the first one in hand

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    for step in range(ring):
        here, there = step % 2, 1 - step % 2
        last = step == ring - 1
        if not last:
            if step:
                pl.semaphore_wait(free_buffer, 1)
            send = pltpu.make_async_remote_copy(chunks.at[here], chunks.at[there], sends.at[step],
                                                recvs.at[step], device_id=(right,))
            send.start()
        product = jnp.dot(chunks[here], w_ref[...], preferred_element_type=jnp.float32)
        out_ref[lax.rem(me + ring - step, ring)] = product.astype(out_ref.dtype)
        if not last:
            send.wait()
        if step < ring - 2:  # my buffer `here` is free for what the left neighbour sends next
            pl.semaphore_signal(free_buffer, 1, device_id=(left,))


def all_gather_matmul(x: jax.Array, w: jax.Array, *, mesh: jax.sharding.Mesh,
                      axis_name: str = "x") -> jax.Array:
    """x @ w with x gathered chunk by chunk round the ring while the chunks in hand multiply."""
    ring = mesh.shape[axis_name]
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"all_gather_matmul: cannot multiply {x.shape} by {w.shape}")
    if x.dtype != w.dtype:
        raise ValueError(f"all_gather_matmul: x is {x.dtype}, w is {w.dtype}")
    for name, length in (("M", x.shape[0]), ("N", w.shape[1])):
        if length % ring:
            raise ValueError(f"all_gather_matmul: {name}={length} does not divide by {ring} devices")
    rows, depth, width = x.shape[0] // ring, x.shape[1], w.shape[1] // ring
    # VMEM held at once: two x chunks in flight, w's columns, the whole output, one f32 product;
    # past the 16 MiB the compiler gives by default, ask for it (with a quarter more, at most 100 MiB)
    held = (2 * rows * depth + depth * width + ring * rows * width) * x.dtype.itemsize + rows * width * 4
    limit = min(max(16 << 20, held + held // 4), 100 << 20)

    def one_device(x_shard, w_shard):
        blocks = pl.pallas_call(
            functools.partial(_gather_and_multiply, axis_name=axis_name, ring=ring),
            out_shape=jax.ShapeDtypeStruct((ring, rows, width), x.dtype),
            scratch_shapes=[pltpu.VMEM((2, rows, depth), x.dtype), pltpu.SemaphoreType.DMA((ring - 1,)),
                            pltpu.SemaphoreType.DMA((ring - 1,)), pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(collective_id=0, vmem_limit_bytes=limit),
        )(x_shard, w_shard)
        return blocks.reshape(ring * rows, width)

    return jax.shard_map(one_device, mesh=mesh, in_specs=(jax.P(axis_name), jax.P(None, axis_name)),
                         out_specs=jax.P(None, axis_name), check_vma=False)(x, w)
