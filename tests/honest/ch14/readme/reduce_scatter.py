"""Exercise ch14.reduce_scatter: a float32 partial sum round the ring, one receive slot per step."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def reduce_scatter_kernel(x_ref, o_ref, send_buf, recv_buf, send_sems, recv_sems, *, axis_name, n):
    me = lax.axis_index(axis_name)
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    partial = x_ref[lax.rem(me + n - 1, n)].astype(jnp.float32)
    for s in range(n - 1):
        send_buf[s] = partial
        copy = pltpu.make_async_remote_copy(send_buf.at[s], recv_buf.at[s], send_sems.at[s], recv_sems.at[s],
                                            device_id=(right,))
        copy.start()
        copy.wait()
        chunk = lax.rem(me + 2 * n - s - 2, n)
        partial = recv_buf[s] + x_ref[chunk].astype(jnp.float32)
    o_ref[...] = partial.astype(o_ref.dtype)


def reduce_scatter(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """Device j keeps chunk j of the sum over the ring, summed in float32."""
    n = mesh.shape[axis_name]
    if x.shape[0] % (n * n):
        raise ValueError(f"axis 0 of x ({x.shape[0]}) is not a multiple of n * n = {n * n}")
    rows, cols = x.shape[0] // (n * n), x.shape[1]

    def per_device(shard):
        return pl.pallas_call(
            functools.partial(reduce_scatter_kernel, axis_name=axis_name, n=n),
            out_shape=jax.ShapeDtypeStruct((rows, cols), x.dtype),
            scratch_shapes=[pltpu.VMEM((n - 1, rows, cols), jnp.float32),
                            pltpu.VMEM((n - 1, rows, cols), jnp.float32),
                            pltpu.SemaphoreType.DMA((n - 1,)), pltpu.SemaphoreType.DMA((n - 1,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(shard.reshape(n, rows, cols))

    return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(axis_name),
                         check_vma=False)(x)
