"""Exercise ch14.collective_matmul: all-gather matmul, the copies hidden behind the matmuls
(README: "Hiding communication behind compute").

Write all_gather_matmul(x, w, *, mesh, axis_name): x split by rows over the ring, w by
columns; device j computes all_gather(x) @ w_j. In one pallas_call per device, the
chunks of x travel the ring in two VMEM buffers: each step starts sending the chunk
in hand to the right, multiplies it, then waits for the next one. Credits keep a
sender from overwriting a buffer its neighbour still uses.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def all_gather_matmul(x: jax.Array, w: jax.Array, *, mesh: jax.sharding.Mesh,
                      axis_name: str = "x") -> jax.Array:
    """all_gather(x) @ w with x split by rows and w and the result by columns over the ring.

    x: (M, K), w: (K, N), one dtype (float32 or bfloat16); M and N divide by n, the
    size of axis `axis_name`; x is split along M (jax.P(axis_name)), w along N
    (jax.P(None, axis_name)). Returns (M, N) in x's dtype, split along N: x @ w with a
    float32 accumulator. The matmul of one chunk must run while the next chunk's copy
    is in flight. Raise ValueError for mismatched shapes or dtypes, or M or N that do
    not divide by n.
    """
    raise NotImplementedError("write all_gather_matmul(): send the chunk in hand, multiply it, "
                              "then wait for the next")
