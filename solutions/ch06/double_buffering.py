"""Column sums through a hand-written double-buffered DMA pipeline.

x stays in HBM (`memory_space=pl.ANY`): the kernel runs once, with no grid, and moves
x itself, block_rows rows at a time, into two VMEM slots. Block b lives in slot b % 2,
and its copy signals DMA semaphore b % 2. Each loop step

  1. starts the copy of block b + 1 into the other slot (nothing reads that slot now:
     block b - 1 was summed in the previous step),
  2. waits for block b's copy, the one started a step earlier,
  3. adds the block's column sums into the f32 output, resident in VMEM.

So block b + 1 moves while block b is summed. The copy of block 0 starts before the
loop. Every copy started is waited for exactly once, on its own slot's semaphore,
before its slot is read, and before the kernel ends.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def column_sums_kernel(x_hbm, o_ref, slots, copied, *, block_rows: int, num_blocks: int):
    def copy(block, slot):
        rows = pl.ds(block * block_rows, block_rows)
        return pltpu.make_async_copy(x_hbm.at[rows], slots.at[slot], copied.at[slot])

    copy(0, 0).start()
    o_ref[...] = jnp.zeros_like(o_ref)

    def step(block, carry):
        slot = block % 2

        @pl.when(block + 1 < num_blocks)
        def _prefetch():
            copy(block + 1, 1 - slot).start()

        copy(block, slot).wait()
        o_ref[...] += jnp.sum(slots[slot].astype(jnp.float32), axis=0, keepdims=True)
        return carry

    jax.lax.fori_loop(0, num_blocks, step, 0)


def column_sums(x: jax.Array, *, block_rows: int = 8) -> jax.Array:
    """x.sum(axis=0) in float32 for x (M, N); M must be a multiple of block_rows."""
    m, n = x.shape
    block_rows = min(block_rows, m)
    if m % block_rows:
        raise ValueError(f"column_sums: M={m} is not a multiple of block_rows={block_rows}")
    sums = pl.pallas_call(
        functools.partial(column_sums_kernel, block_rows=block_rows, num_blocks=m // block_rows),
        out_shape=jax.ShapeDtypeStruct((1, n), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, block_rows, n), x.dtype), pltpu.SemaphoreType.DMA((2,))],
    )(x)
    return sums.reshape(n)
