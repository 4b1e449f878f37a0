"""All-gather matmul with the communication hidden behind the compute.

x (M, K) is split by rows over the ring, w (K, N) by columns: device j owns x_j and
w_j and must produce all_gather(x) @ w_j, the (M, N/n) column block j of x @ w.
Gathering x first and multiplying after would leave the MXU idle during the whole
gather. Instead the chunks of x travel around the ring (as in the all-gather) and
each device multiplies the chunk in hand while the next one is in flight.

Two VMEM buffers hold the chunks. At step s device j holds chunk (j - s) mod n in
buffer s % 2: it starts copying that buffer into the other buffer of its right
neighbour, multiplies it by w_j into the chunk's rows of the output, then waits for
the chunk arriving from the left (in its other buffer) and for its own send. The
prologue copies x_j into buffer 0; the last step sends nothing.

A buffer is reused every second step, so a sender must not write into a neighbour's
buffer while the neighbour still multiplies from it or still sends it on. Each
device therefore tells its left neighbour when a buffer is free (a REGULAR
semaphore signalled remotely, a credit), and a sender waits for that credit before
every send but the first: for the first, the barrier handshake says the empty
buffer 1 is free. Credits are only given for sends that will happen, so every
semaphore is back at zero when the kernel ends.

A grid over the columns of w_j pipelines w and the output through VMEM (block_n columns a
step): the first step runs the ring, multiplying each chunk as it arrives by the first
columns and keeping it in `gathered`; every later step multiplies the gathered x by its
columns of w_j while the pipeline brings in the next columns and writes back the last. So
only the first block of w_j comes in before any compute, and only the last block of the
output leaves after it (README, "Gate 04's size").
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

VMEM_LIMIT_DEFAULT = 16 * 1024 * 1024  # v5e's default scoped VMEM limit
VMEM_LIMIT_MAX = 100 * 1024 * 1024  # of its 128 MiB, leaving the compiler room of its own
BLOCK_N = 4096  # columns of w_j and of the output a grid step takes, at most
LANES = 128


def block_n(n_shard: int) -> int:
    """Columns a grid step takes: the largest multiple of 128 up to BLOCK_N that divides the shard in two
    or more steps (so the pipeline has a next block to bring in), else the whole shard in one."""
    for block in (BLOCK_N, 2048, 1024, 512, 256, LANES):
        if 2 * block <= n_shard and n_shard % block == 0:
            return block
    return n_shard


def all_gather_matmul_kernel(x_ref, w_ref, o_ref, buffers, local_sem, send_sems, recv_sems, credit, gathered,
                             *, axis_name, size):
    """One grid step: w_ref holds some columns of w_j, o_ref the same columns of the output."""
    ring = functools.partial(_ring, x_ref, w_ref, o_ref, buffers, gathered, local_sem, send_sems, recv_sems,
                             credit, axis_name=axis_name, size=size)
    pl.when(pl.program_id(0) == 0)(ring)

    @pl.when(pl.program_id(0) > 0)
    def _from_gathered():  # x is whole in VMEM: its chunks by these columns, one chunk's f32 product at a time
        rows = x_ref.shape[0]
        for chunk in range(size):
            o_ref[pl.ds(chunk * rows, rows), :] = jnp.dot(
                gathered[chunk], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


def _ring(x_ref, w_ref, o_ref, buffers, gathered, local_sem, send_sems, recv_sems, credit, *, axis_name, size):
    """The first grid step: the chunks travel the ring, each multiplied by the first columns while the
    next is in flight, and kept in `gathered` for the later columns."""
    me = lax.axis_index(axis_name)
    right = lax.rem(me + 1, size)
    left = lax.rem(me + size - 1, size)
    rows = x_ref.shape[0]

    prologue = pltpu.make_async_copy(x_ref, buffers.at[0], local_sem)
    prologue.start()
    prologue.wait()

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_wait(barrier, 1)

    for step in range(size):
        held, other = step % 2, 1 - step % 2
        sends = step < size - 1
        if sends:
            if step > 0:
                pl.semaphore_wait(credit, 1)  # the right neighbour's buffer `other` is free
            hop = pltpu.make_async_remote_copy(buffers.at[held], buffers.at[other], send_sems.at[held],
                                               recv_sems.at[other], device_id=(right,))
            hop.start()
        chunk = lax.rem(me - step + size, size)
        gathered[chunk] = buffers[held]
        o_ref[pl.ds(chunk * rows, rows), :] = jnp.dot(
            buffers[held], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)
        if sends:
            hop.wait()  # the next chunk has landed in `other`, and `held` has been sent
            if step < size - 2:  # the left neighbour sends into `held` at its step + 1
                pl.semaphore_signal(credit, 1, device_id=(left,))


def all_gather_matmul(x: jax.Array, w: jax.Array, *, mesh: jax.sharding.Mesh,
                      axis_name: str = "x") -> jax.Array:
    """all_gather(x) @ w with x split by rows and w and the result by columns over the ring."""
    size = mesh.shape[axis_name]
    (m, k), (k2, n) = x.shape, w.shape
    if k != k2 or x.dtype != w.dtype:
        raise ValueError(f"all_gather_matmul expects (M, K) @ (K, N) of one dtype, got {x.shape} "
                         f"{x.dtype} @ {w.shape} {w.dtype}")
    for name, length in (("M", m), ("N", n)):
        if length % size:
            raise ValueError(f"all_gather_matmul: {name}={length} does not split over the {size} "
                             f"devices of axis {axis_name!r}")

    def per_device(x_shard, w_shard):
        # The grid pipelines block_n columns of w_j and of the output, each double-buffered; x's shard,
        # its two chunk buffers, the gathered x and one chunk's f32 product stay. At gate 04's size
        # this count is about 30 MiB (the compute alone's, whose chunk is the whole x, about 45 MiB):
        # above v5e's 16 MiB default scoped limit and within its 128 MiB (README, "Gate 04's size"),
        # so the limit is raised to fit.
        chunk, n_shard = x_shard.shape[0], w_shard.shape[1]
        block = block_n(n_shard)
        item = jnp.dtype(x.dtype).itemsize
        vmem = (2 * chunk * k + 2 * k * block + 2 * m * block + 2 * chunk * k + m * k) * item + chunk * block * 4
        return pl.pallas_call(
            functools.partial(all_gather_matmul_kernel, axis_name=axis_name, size=size),
            out_shape=jax.ShapeDtypeStruct((m, n_shard), x.dtype),
            grid=(n_shard // block,),
            in_specs=[pl.BlockSpec((chunk, k), lambda j: (0, 0)), pl.BlockSpec((k, block), lambda j: (0, j))],
            out_specs=pl.BlockSpec((m, block), lambda j: (0, j)),
            scratch_shapes=[pltpu.VMEM((2, *x_shard.shape), x.dtype), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,)),
                            pltpu.SemaphoreType.REGULAR, pltpu.VMEM((size, *x_shard.shape), x.dtype)],
            compiler_params=pltpu.CompilerParams(
                collective_id=0, dimension_semantics=("arbitrary",),  # the first step runs the ring
                vmem_limit_bytes=max(VMEM_LIMIT_DEFAULT, min(vmem + vmem // 4, VMEM_LIMIT_MAX))),
        )(x_shard, w_shard)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(jax.P(axis_name), jax.P(None, axis_name)),
                         out_specs=jax.P(None, axis_name), check_vma=False)(x, w)
