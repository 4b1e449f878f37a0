"""Float64 oracles and XLA floors of the collectives chapter 14 grades.

Each is a `references.Reference` whose keyword arguments are the mesh and its axis
(bind them: `PERMUTE.bind(mesh=m, axis_name="x", shift=1)`). The oracle computes the
collective's result on the whole array, in float64, on one device; the floor is
XLA's own collective (lax.ppermute, lax.all_gather, lax.psum_scatter) inside a
shard_map over the same mesh, at the course's precision contract (sums and matmuls
accumulated in float32, rounded once). Arrays are split along axis 0 over the
ring (the all-gather matmul's w and result along axis 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .references import Reference, matmul_floor, matmul_oracle


def _ring_size(mesh, axis_name) -> int:
    return mesh.shape[axis_name]


def _on_ring(per_device, mesh, axis_name, in_specs=None, out_specs=None):
    spec = jax.P(axis_name)
    return jax.shard_map(per_device, mesh=mesh, in_specs=in_specs or spec,
                         out_specs=spec if out_specs is None else out_specs, check_vma=False)


def _permute_oracle(x, *, mesh, axis_name, shift):
    return jnp.roll(x, shift * (x.shape[0] // _ring_size(mesh, axis_name)), axis=0)


def _permute_floor(x, *, mesh, axis_name, shift):
    n = _ring_size(mesh, axis_name)
    pairs = [(i, (i + shift) % n) for i in range(n)]
    return _on_ring(lambda shard: lax.ppermute(shard, axis_name, pairs), mesh, axis_name)(x)


def _exchange_oracle(x, *, mesh, axis_name):
    n = _ring_size(mesh, axis_name)
    shards = x.reshape(n, x.shape[0] // n, *x.shape[1:])
    return shards[jnp.array([i ^ 1 for i in range(n)])].reshape(x.shape)  # shard i from device i ^ 1


def _exchange_floor(x, *, mesh, axis_name):
    pairs = [(i, i ^ 1) for i in range(_ring_size(mesh, axis_name))]
    return _on_ring(lambda shard: lax.ppermute(shard, axis_name, pairs), mesh, axis_name)(x)


def _all_gather_oracle(x, *, mesh, axis_name):
    return x  # every device ends with all of x


def _all_gather_floor(x, *, mesh, axis_name):
    return _on_ring(lambda shard: lax.all_gather(shard, axis_name, tiled=True), mesh, axis_name,
                    out_specs=jax.P())(x)


def _reduce_scatter_oracle(x, *, mesh, axis_name):
    n = _ring_size(mesh, axis_name)
    shards = x.reshape(n, n, x.shape[0] // (n * n), *x.shape[1:])  # (device, chunk, rows, ...)
    return shards.sum(axis=0).reshape(x.shape[0] // n, *x.shape[1:])


def _reduce_scatter_floor(x, *, mesh, axis_name):
    def per_device(shard):
        return lax.psum_scatter(shard.astype(jnp.float32), axis_name, scatter_dimension=0,
                                tiled=True).astype(x.dtype)
    return _on_ring(per_device, mesh, axis_name)(x)


def _all_gather_matmul_oracle(x, w, *, mesh, axis_name):
    return matmul_oracle(x, w)


def _all_gather_matmul_floor(x, w, *, mesh, axis_name):
    """Gather first, multiply after: XLA's all-gather, then its matmul of the gathered x."""
    def per_device(x_shard, w_shard):
        return matmul_floor(lax.all_gather(x_shard, axis_name, tiled=True), w_shard)
    return _on_ring(per_device, mesh, axis_name, in_specs=(jax.P(axis_name), jax.P(None, axis_name)),
                    out_specs=jax.P(None, axis_name))(x, w)


PERMUTE = Reference("ring permute (lax.ppermute)", _permute_oracle, _permute_floor)
PAIR_EXCHANGE = Reference("pair exchange (lax.ppermute with pairs i, i ^ 1)", _exchange_oracle,
                          _exchange_floor)
ALL_GATHER = Reference("all-gather (lax.all_gather)", _all_gather_oracle, _all_gather_floor)
REDUCE_SCATTER = Reference("reduce-scatter (lax.psum_scatter)", _reduce_scatter_oracle,
                           _reduce_scatter_floor)
ALL_GATHER_MATMUL = Reference("all-gather matmul", _all_gather_matmul_oracle, _all_gather_matmul_floor)
