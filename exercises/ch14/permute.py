"""Exercise ch14.permute: a ring permute with one remote DMA (README: "Remote DMA" and "The barrier").

Write ring_permute(x, *, mesh, axis_name, shift) as a shard_map over `axis_name` whose
per-device function is one pallas_call: a barrier handshake with the devices you
send to and receive from, then one remote DMA of your shard to the device `shift`
places to your right. No lax.ppermute: the graded tests read your program.
"""

import functools

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def ring_permute(x: jax.Array, *, mesh: jax.sharding.Mesh, axis_name: str = "x",
                 shift: int = 1) -> jax.Array:
    """Shard i of x (split along axis 0 over `axis_name`) moves to device (i + shift) mod n.

    x: any shape and dtype whose axis 0 divides by n, the size of axis `axis_name` of
    `mesh`; shift: any int, negative included. Returns an array of x's shape and dtype,
    split the same way, equal to lax.ppermute(shard, axis_name, [(i, (i + shift) % n)]).
    Raise ValueError if axis 0 of x does not divide by n.
    """
    raise NotImplementedError("write ring_permute(): a barrier handshake, then one remote DMA to "
                              "(me + shift) mod n")
