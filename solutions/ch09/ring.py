"""Ring collectives from lax.ppermute: what XLA's all-gather, reduce-scatter and all-reduce do.

Inside jax.shard_map each device holds its own shard; lax.ppermute with the pairs
(j, j + 1) moves every device's value one device to the right at once: one ring step,
each link carrying one chunk. A reduce-scatter cuts each shard into n chunks and walks
partial sums round the ring, so that after n - 1 steps device i holds chunk i summed
over every device; an all-gather walks the finished chunks round once more. Each step
moves 1/n of a shard, so an all-reduce sends 2 (n - 1) / n of a shard per device, the
least any schedule can (How to Scale Your Model, part 3). Shards whose rows n does not
divide are padded to whole chunks and the padding is dropped at the end.
"""

import jax
import jax.numpy as jnp
from jax import lax


def _axis(mesh):
    axis = mesh.axis_names[0]
    return axis, mesh.shape[axis]


def _shift_right(value, axis, n):
    return lax.ppermute(value, axis, [(j, (j + 1) % n) for j in range(n)])


def _gather_chunks(chunk, axis, n):
    """(n, *chunk.shape): every device's chunk, in device order, on every device."""
    i = lax.axis_index(axis)
    out = jnp.zeros((n, *chunk.shape), chunk.dtype).at[i].set(chunk)
    travelling = chunk
    for s in range(n - 1):
        travelling = _shift_right(travelling, axis, n)  # now device (i - s - 1)'s chunk
        out = out.at[(i - s - 1) % n].set(travelling)
    return out


def _reduce_chunks(chunks, axis, n):
    """chunks (n, ...) of partial sums -> chunk i (this device's) summed over every device."""
    i = lax.axis_index(axis)
    for s in range(n - 1):
        received = _shift_right(chunks[(i - s - 1) % n], axis, n)
        chunks = chunks.at[(i - s - 2) % n].add(received)
    return chunks[i]


def all_gather(x: jax.Array, mesh) -> jax.Array:
    """x (n*r, c) sharded over the mesh's axis -> (n*n*r, c): every device's block is all of x."""
    axis, n = _axis(mesh)

    def body(shard):
        return _gather_chunks(shard, axis, n).reshape(-1, *shard.shape[1:])

    return jax.shard_map(body, mesh=mesh, in_specs=jax.P(axis), out_specs=jax.P(axis))(x)


def reduce_scatter(x: jax.Array, mesh) -> jax.Array:
    """x (n*r, c), each device's r rows a partial sum -> (r, c) summed, device i holding rows i*r/n..."""
    axis, n = _axis(mesh)
    rows = x.shape[0] // n
    if x.shape[0] % n or rows % n:
        raise ValueError(f"reduce_scatter: each device's {x.shape[0] / n:g} rows must split into "
                         f"{n} equal chunks, one per device")

    def body(shard):
        return _reduce_chunks(shard.reshape(n, rows // n, *shard.shape[1:]), axis, n)

    return jax.shard_map(body, mesh=mesh, in_specs=jax.P(axis), out_specs=jax.P(axis))(x)


def all_reduce(x: jax.Array, mesh) -> jax.Array:
    """x (n*r, c) sharded -> (n*r, c): every device's block is the sum of all n blocks."""
    axis, n = _axis(mesh)

    def body(shard):
        rows = shard.shape[0]
        padded = jnp.pad(shard, [(0, -rows % n)] + [(0, 0)] * (shard.ndim - 1))
        mine = _reduce_chunks(padded.reshape(n, -1, *shard.shape[1:]), axis, n)
        return _gather_chunks(mine, axis, n).reshape(-1, *shard.shape[1:])[:rows]

    return jax.shard_map(body, mesh=mesh, in_specs=jax.P(axis), out_specs=jax.P(axis))(x)
