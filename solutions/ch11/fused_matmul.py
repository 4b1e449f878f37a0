"""act(x @ w + b) as one kernel: one HBM write instead of three.

XLA's unfused sequence writes the matmul result to HBM, reads it back to add
the bias, writes again, reads again for the activation. Here the bias add and
the activation run on the f32 accumulator while it is still in VMEM, in the
flush step of the k loop, and the result goes to HBM once. The bias is added
exactly once per output block (in the flush), never once per k step. Blocks and
their VMEM as in matmul.py (each exercise stands on its own); the epilogue's f32
temporaries fit in the half again asked for beyond the estimate.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ACTIVATIONS = {
    "relu": lambda v: jnp.maximum(v, 0.0),
    "gelu": lambda v: jax.nn.gelu(v, approximate=True),
    "identity": lambda v: v,
}


def _fused_kernel(x_ref, w_ref, b_ref, o_ref, acc_ref, *, activation):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _flush():
        z = acc_ref[...] + b_ref[...].astype(jnp.float32)
        o_ref[...] = ACTIVATIONS[activation](z).astype(o_ref.dtype)


def vmem_limit(bm: int, bk: int, bn: int, itemsize: int) -> int | None:
    """The scoped VMEM to ask for (as matmul.py's: this exercise stands on its own), else None."""
    needed = 2 * (bm * bk + bk * bn + bm * bn) * itemsize + 2 * 4 * bm * bn
    return None if needed <= 12 * 2**20 else min(needed * 3 // 2, 100 * 2**20)


def matmul_bias_act(x: jax.Array, w: jax.Array, b: jax.Array, *, activation: str = "relu",
                    bm: int = 1024, bk: int = 1024, bn: int = 1024) -> jax.Array:
    """activation(x @ w + b) in x's dtype; b has shape (N,). activation: relu, gelu, identity."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    (m, k), (k2, n) = x.shape, w.shape
    if k != k2 or b.shape != (n,):
        raise ValueError(f"expected x (M, K), w (K, N), b (N,), got {x.shape}, {w.shape}, {b.shape}")
    bm, bk, bn = min(bm, m), min(bk, k), min(bn, n)
    for dim, size, block in (("M", m, bm), ("K", k, bk), ("N", n, bn)):
        if size % block:
            raise ValueError(f"matmul_bias_act: {dim}={size} is not a multiple of its block {block}")

    # The activation is a compile-time parameter of the kernel, bound as JAX's own kernels bind theirs.
    kernel = functools.partial(_fused_kernel, activation=activation)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=vmem_limit(bm, bk, bn, x.dtype.itemsize)),
    )(x, w, b.reshape(1, n))
