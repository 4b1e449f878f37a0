"""Chapter 9 (ICI ⇄ chips): what XLA compiles JAX's collectives and the chapter's rings into, read off
the installed toolchain on the simulated CPU devices (and libtpu for a v5e slice). docs/facts.md lists
each claim beside its test; the ICI figures and worked numbers are How to Scale Your Model's."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from pytest_tpucourse.public_kernels import course_solution
from pytest_tpucourse.readers.compiled_collectives import collectives_in

from .toolchain import compiler

REPO = Path(__file__).resolve().parents[2]


def collectives(fn, x, mesh) -> list[tuple[str, str]]:
    """(op, shape) of every collective in the optimized HLO of fn(x, mesh), compiled for the run's devices."""
    hlo = jax.jit(fn, static_argnums=1).lower(x, mesh).compile().as_text()
    return [(c.op, c.shape) for c in collectives_in(hlo)]


def psum(x, mesh):
    return jax.shard_map(lambda shard: lax.psum(shard, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)


def test_ppermute_moves_every_shard_one_device_along_the_ring(mesh):
    ring = mesh(4)
    right = [(j, (j + 1) % 4) for j in range(4)]
    moved = jax.shard_map(lambda shard: lax.ppermute(shard, "x", right), mesh=ring, in_specs=P("x"),
                          out_specs=P("x"))(jnp.arange(4.0))
    assert list(np.asarray(moved)) == [3.0, 0.0, 1.0, 2.0]


def test_the_ring_all_reduce_compiles_to_collective_permutes_and_psum_to_one_all_reduce(mesh):
    all_reduce = course_solution(REPO, "ch09.ring.all_reduce")
    ring, x = mesh(8), jnp.zeros((48, 16), jnp.float32)
    assert collectives(all_reduce, x, ring) == [("collective-permute", "f32[1,16]{1,0}")] * 14  # 2 × 7 steps of a row
    assert collectives(psum, x, ring) == [("all-reduce", "f32[6,16]{1,0}")]


def test_the_ring_sums_in_another_order_than_psum(mesh):
    all_reduce = jax.jit(course_solution(REPO, "ch09.ring.all_reduce"), static_argnums=1)
    ring, rng = mesh(4), np.random.default_rng(0)
    floats = jnp.asarray(rng.standard_normal((16, 16)), jnp.float32)
    ints = jnp.asarray(rng.integers(-1000, 1000, (16, 16)), jnp.int32)
    ring_sum, xla_sum = np.asarray(all_reduce(floats, ring)), np.asarray(jax.jit(psum, static_argnums=1)(floats, ring))
    assert not (ring_sum == xla_sum).all() and np.allclose(ring_sum, xla_sum, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(all_reduce(ints, ring)), np.asarray(psum(ints, ring)))


def test_the_simulated_devices_compile_to_the_collectives_a_v5e_slice_runs(mesh):
    all_reduce = course_solution(REPO, "ch09.ring.all_reduce")
    ring = mesh(4)
    x = jax.device_put(jnp.zeros((32, 16), jnp.float32), NamedSharding(ring, P("x")))
    on_cpus = [op for op, _ in collectives(all_reduce, x, ring)]
    on_a_v5e = [c.op for c in collectives_in(compiler()(lambda x: all_reduce(x, ring), x).optimized_hlo)]
    assert on_cpus == on_a_v5e == ["collective-permute"] * 6


def test_the_all_reduce_strategy_wins_past_d_5100_only_with_a_large_batch():
    """The sharded matmul A[B, D] · W[D_X, F]: gather W and multiply, or multiply the shards and
    all-reduce C, priced with the course's collective model (instruments/ici.py) on chips.py's v5p,
    over a ring of 16 used both ways. The all-reduce wins when D > 2·C/W_ici (≈ 5,100), the book's
    answer under its large-batch premise, or when B < D/2, whatever the chip."""
    from pytest_tpucourse import chips
    from pytest_tpucourse.instruments import ici

    v5p = chips.get_chip("v5p")
    link, peak, x, f = ici.link_bandwidth(v5p), v5p.peak_flops, 16, 8192
    ridge = peak / (2 * link)  # C / W_ici, W_ici both directions of a link
    assert (ridge, 2 * ridge) == (2550.0, 5100.0)

    def gather(b, d):
        return max(2 * b * d * f / peak, ici.seconds("all-gather", 2 * d * f, x, link_bandwidth=link))

    def all_reduce(b, d):
        return max(2 * b * d * f / (x * peak), ici.seconds("all-reduce", 2 * b * f, x, link_bandwidth=link))

    for b in (256, 1000, 3000, 8192):
        assert (gather(b, 4096) == 2 * b * 4096 * f / peak) == (b > ridge)  # compute-bound past C / W_ici rows
        for d in (1024, 4096, 8192):
            assert (all_reduce(b, d) < gather(b, d)) == (d > 2 * ridge or b < d / 2), (b, d)
    # The worked case: D = 4,096 < 5,100, and still the all-reduce wins at 1,000 rows, not at 3,000.
    assert all_reduce(1000, 4096) < gather(1000, 4096) and all_reduce(3000, 4096) > gather(3000, 4096)
