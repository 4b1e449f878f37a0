"""Exercise ch09.ring: collectives built from lax.ppermute (README: "Collectives are kernels too")."""

import jax
import jax.numpy as jnp  # noqa: F401
from jax import lax  # noqa: F401


def all_gather(x: jax.Array, mesh) -> jax.Array:
    """x of shape (n*r, c), device i holding rows i*r..(i+1)*r of a 1-D mesh of n devices.

    Returns (n*n*r, c) sharded the same way: every device's block of n*r rows is all of x.
    Equal to lax.all_gather(shard, axis, tiled=True) under jax.shard_map, built from
    lax.ppermute only.
    """
    raise NotImplementedError("write all_gather(): pass every shard once round the ring with lax.ppermute")


def reduce_scatter(x: jax.Array, mesh) -> jax.Array:
    """x of shape (n*r, c): each device's r rows are a partial sum of one (r, c) array.

    Returns (r, c), their sum, sharded over the devices: device i holds rows
    i*r/n..(i+1)*r/n. Raise ValueError when r is not a multiple of n. Equal to
    lax.psum_scatter(shard, axis, tiled=True), built from lax.ppermute only.
    """
    raise NotImplementedError("write reduce_scatter(): walk partial sums of n chunks round the ring")


def all_reduce(x: jax.Array, mesh) -> jax.Array:
    """x of shape (n*r, c), any r. Returns (n*r, c): every device's r rows are the sum of all n blocks.

    Equal to lax.psum(shard, axis), built from lax.ppermute only, moving one n-th of a
    shard per step: a reduce-scatter, then an all-gather.
    """
    raise NotImplementedError("write all_reduce(): a ring reduce-scatter, then a ring all-gather")
