"""Exercise ch11.fused_matmul: activation(x @ w + b) in one kernel.

Extend your matmul: add the bias and apply the activation to the f32
accumulator in the flush step, so the result is written to HBM once. The
graded tests also check that the function is exactly one pallas_call with no
arithmetic outside it.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def matmul_bias_act(x: jax.Array, w: jax.Array, b: jax.Array, *, activation: str = "relu",
                    bm: int = 1024, bk: int = 1024, bn: int = 1024) -> jax.Array:
    """activation(x @ w + b) in x's dtype.

    x is (M, K), w is (K, N), b is (N,). activation is "relu", "gelu" (the tanh
    approximation, jax.nn.gelu(..., approximate=True)) or "identity".
    Gate 01 times it at its default blocks: 1024 each, which a v5e runs at XLA's
    speed but which need more VMEM than the 16 MiB default scoped limit (the
    chapter's README, "Blocks and VMEM on the chip").
    """
    raise NotImplementedError("write matmul_bias_act(): your matmul, plus bias and activation in the flush step")
