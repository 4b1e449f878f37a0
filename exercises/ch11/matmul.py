"""Exercise ch11.matmul: tiled matmul with an f32 VMEM accumulator.

Write matmul(x, y, *, bm, bk, bn) as one pallas_call over the grid
(M/bm, N/bn, K/bk): an f32 scratch accumulator initialised on the first k step
and written to the output on the last, with dimension semantics
("parallel", "parallel", "arbitrary"). bf16 inputs must still accumulate in f32.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul(x: jax.Array, y: jax.Array, *, bm: int = 1024, bk: int = 1024, bn: int = 1024) -> jax.Array:
    """x @ y in x's dtype, accumulated in f32.

    x is (M, K), y is (K, N), both of one dtype; each dimension is a multiple of
    its block (a block larger than its dimension shrinks to the dimension).
    Gate 01 times it at its default blocks: 1024 each, which a v5e runs at XLA's
    speed but which need more VMEM than the 16 MiB default scoped limit (the
    chapter's README, "Blocks and VMEM on the chip").
    """
    raise NotImplementedError("write matmul(): grid (M//bm, N//bn, K//bk) with a VMEM f32 accumulator")
