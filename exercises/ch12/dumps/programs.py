"""The programs behind the TPU dumps in this folder (bench/capture_tpu_dumps.py compiles them).

Each dump's first line says what compiled it, for which chip, and when. Source locations
in the dumps point at the lines below: editing this file above a program moves its
lines, and the dumps must then be captured again.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

# Arguments of each program: (shape, dtype) per argument.
ARGS = {
    "mlp_block": [((256, 512), "bfloat16"), ((512, 256), "bfloat16"), ((1, 256), "float32")],
    "dots": [((4, 256, 512), "bfloat16"), ((4, 512, 128), "bfloat16"), ((256, 512), "bfloat16"),
             ((512, 384), "bfloat16"), ((128, 4, 256), "bfloat16"), ((4, 384, 256), "bfloat16")],
    "sharded_scan": [((8, 512, 256), "bfloat16"), ((256, 256), "bfloat16")],
}


def _bias_gelu_kernel(h_ref, b_ref, o_ref):
    o_ref[...] = jax.nn.gelu(h_ref[...] + b_ref[...], approximate=True)


def bias_gelu(h, b, block_rows=128):
    """gelu(h + b) as one Pallas kernel over blocks of rows."""
    rows, cols = h.shape
    return pl.pallas_call(
        _bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype),
        grid=(rows // block_rows,),
        in_specs=[pl.BlockSpec((block_rows, cols), lambda i: (i, 0)),
                  pl.BlockSpec((1, cols), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((block_rows, cols), lambda i: (i, 0)),
    )(h, b)


def mlp_block(x, w, b):
    """An XLA matmul, a Pallas kernel, then a softmax XLA fuses."""
    h = jnp.dot(x, w, preferred_element_type=jnp.float32)
    a = bias_gelu(h, b)
    s = a - a.max(axis=-1, keepdims=True)
    p = jnp.exp(s)
    return p / p.sum(axis=-1, keepdims=True)


def dots(a, b, c, d, e, f):
    """Six contractions, each with its own output shape, as the MXU sees them."""
    f32 = functools.partial(lax.dot_general, preferred_element_type=jnp.float32)
    return (
        f32(a, b, (((2,), (1,)), ((0,), (0,)))),   # bmk,bkn->bmn            (4, 256, 128)
        f32(c, d, (((1,), (0,)), ((), ()))),       # mk,kn->mn               (256, 384)
        f32(d, c, (((0,), (1,)), ((), ()))),       # km,nk->mn               (384, 256)
        f32(e, f, (((2,), (2,)), ((1,), (0,)))),   # mbk,bnk->bmn            (4, 128, 384)
        f32(f, e, (((2,), (2,)), ((0,), (1,)))),   # bnk,mbk->bnm            (4, 384, 128)
        f32(c, c, (((0,), (0,)), ((), ()))),       # km,kn->mn (a Gram matrix) (512, 512)
    )


def sharded_scan(x, w, mesh):
    """Eight layers of a data-parallel matmul whose weight gradient-like sum crosses devices."""
    from jax.sharding import PartitionSpec as P

    def layer(h, _):
        y = jnp.tanh(jnp.dot(h, w, preferred_element_type=jnp.float32)).astype(h.dtype)
        total = jax.shard_map(lambda t: lax.psum(t.sum(axis=0), "x"), mesh=mesh,
                              in_specs=P("x"), out_specs=P())(y)
        return y, total
    return lax.scan(layer, x[0], None, length=x.shape[0])


def naive_attention(q, k, v):
    """Chapter 4's naive attention, written the obvious way: scores, softmax over keys, P·V.

    XLA:TPU writes the scores with one kernel and runs the softmax and P·V as a Mosaic kernel
    of its own, `online-softmax` (chapter 4). Its arguments are listed here, after the program,
    so that adding it moved no line of the programs above.
    """
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


ARGS["naive_attention"] = [((1, 2, 256, 64), "float32")] * 3
