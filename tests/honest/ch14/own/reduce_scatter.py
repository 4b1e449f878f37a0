"""Exercise ch14.reduce_scatter: the partial sum carried through a fori_loop, in float32."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _reduce_scatter(chunks_ref, out_ref, outbox, inbox, sent, received, *, axis_name, n):
    me = lax.axis_index(axis_name)

    def chunk(offset):  # my term of chunk (me - offset) mod n, in float32
        return chunks_ref[lax.rem(me + 2 * n - offset, n)].astype(jnp.float32)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + n - 1, n),))
    pl.semaphore_wait(barrier, 1)

    def hop(s, running):
        outbox[s] = running
        dma = pltpu.make_async_remote_copy(outbox.at[s], inbox.at[s], sent.at[s], received.at[s],
                                           device_id=(lax.rem(me + 1, n),))
        dma.start()
        dma.wait()
        return inbox[s] + chunk(s + 2)

    out_ref[...] = lax.fori_loop(0, n - 1, hop, chunk(1)).astype(out_ref.dtype)


def reduce_scatter(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x") -> jax.Array:
    """Chunk j of the ring's sum on device j, rounded once to x's dtype."""
    n = mesh.shape[axis_name]
    total_rows, cols = x.shape
    if total_rows % (n * n) != 0:
        raise ValueError(f"reduce_scatter: axis 0 is {total_rows}, not a multiple of {n} * {n}")
    rows = total_rows // (n * n)
    slots = pltpu.VMEM((n - 1, rows, cols), jnp.float32)

    def one_device(shard):
        return pl.pallas_call(
            functools.partial(_reduce_scatter, axis_name=axis_name, n=n),
            out_shape=jax.ShapeDtypeStruct((rows, cols), x.dtype),
            scratch_shapes=[slots, slots, pltpu.SemaphoreType.DMA((n - 1,)), pltpu.SemaphoreType.DMA((n - 1,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(jnp.reshape(shard, (n, rows, cols)))

    return jax.shard_map(one_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(axis_name),
                         check_vma=False)(x)
