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
                    bm: int = 128, bk: int = 128, bn: int = 128) -> jax.Array:
    """activation(x @ w + b) in x's dtype.

    x is (M, K), w is (K, N), b is (N,). activation is "relu", "gelu" (the tanh
    approximation, jax.nn.gelu(..., approximate=True)) or "identity".
    """
    raise NotImplementedError("write matmul_bias_act(): your matmul, plus bias and activation in the flush step")
