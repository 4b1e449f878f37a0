"""Exercise ch14.collective_matmul: send the chunk in hand, multiply it, then wait for the next."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def collective_matmul_kernel(x_ref, w_ref, o_ref, buffers, local_sem, send_sems, recv_sems, credit, *,
                             axis_name, n):
    me = lax.axis_index(axis_name)
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)

    prologue = pltpu.make_async_copy(x_ref, buffers.at[0], local_sem)
    prologue.start()
    prologue.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    for s in range(n):
        cur = s % 2
        sending = s < n - 1
        if sending:
            if s > 0:
                pl.semaphore_wait(credit, 1)  # the right neighbour's other buffer is free again
            copy = pltpu.make_async_remote_copy(buffers.at[cur], buffers.at[1 - cur], send_sems.at[s],
                                                recv_sems.at[s], device_id=(right,))
            copy.start()
        chunk = lax.rem(me + n - s, n)
        o_ref[chunk] = jnp.dot(buffers[cur], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)
        if sending:
            copy.wait()
        if s < n - 2:
            pl.semaphore_signal(credit, 1, device_id=(left,))


def all_gather_matmul(x: jax.Array, w: jax.Array, *, mesh: jax.sharding.Mesh,
                      axis_name: str = "x") -> jax.Array:
    """all_gather(x) @ w, x split by rows and w by columns over the ring."""
    n = mesh.shape[axis_name]
    (m, k), (k2, cols) = x.shape, w.shape
    if k != k2 or x.dtype != w.dtype:
        raise ValueError(f"x {x.shape} {x.dtype} and w {w.shape} {w.dtype} do not multiply")
    if m % n or cols % n:
        raise ValueError(f"M={m} and N={cols} must divide by {n} devices")
    rows = m // n
    itemsize = jnp.dtype(x.dtype).itemsize
    vmem = (2 * rows * k + k * (cols // n) + m * (cols // n)) * itemsize + rows * (cols // n) * 4
    vmem_limit = min(max(16 * 2**20, int(vmem * 1.25)), 100 * 2**20)  # raise the default limit when needed

    def per_device(x_shard, w_shard):
        out = pl.pallas_call(
            functools.partial(collective_matmul_kernel, axis_name=axis_name, n=n),
            out_shape=jax.ShapeDtypeStruct((n, rows, cols // n), x.dtype),
            scratch_shapes=[pltpu.VMEM((2, rows, k), x.dtype), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA((n - 1,)), pltpu.SemaphoreType.DMA((n - 1,)),
                            pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(collective_id=0, vmem_limit_bytes=vmem_limit),
        )(x_shard, w_shard)
        return out.reshape(m, cols // n)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(jax.P(axis_name), jax.P(None, axis_name)),
                         out_specs=jax.P(None, axis_name), check_vma=False)(x, w)
