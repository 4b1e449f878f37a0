"""Graded tests for ch15.band: kv_blocks / q_blocks / widest, the band's block arithmetic.

Checked against tables read off the mask itself (query r sees keys r - window < c <= r),
as traced int32 block indices, the way an index map and pl.program_id pass them, for
unequal blocks, windows that are not a multiple of a block, a window of one key and
windows longer than the sequence.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from pytest_tpucourse import checks
from pytest_tpucourse.references import Reference

# (block_q, block_kv, window, q blocks, kv blocks)
# The last two have more keys than queries (Sq 256, Skv 512; Sq 64, Skv 128): kv blocks past the
# last query are in no query's band, the empty bands `q_blocks` must report as first > last.
GEOMETRIES = [(128, 128, 256, 8, 8), (128, 64, 200, 4, 8), (64, 128, 96, 4, 2),
              (256, 128, 384, 4, 8), (128, 128, 1, 4, 4), (128, 128, 4096, 2, 2), (8, 24, 7, 30, 10),
              (128, 64, 200, 2, 8), (16, 32, 40, 4, 4)]
IDS = [f"bq{g[0]}-bkv{g[1]}-w{g[2]}" for g in GEOMETRIES]


def _pairs(block_q, block_kv, window, n_q, n_kv):
    """[i, j]: does some row of q block i see some key of kv block j?"""
    rows = np.arange(n_q * block_q)[:, None]
    keys = np.arange(n_kv * block_kv)[None, :]
    allowed = (keys <= rows) & (keys > rows - window)
    return allowed.reshape(n_q, block_q, n_kv, block_kv).any(axis=(1, 3))


def _range_table(axis):
    """(first, last) block index along the other axis, from the mask, for each block."""
    def table(blocks, *, block_q, block_kv, window, num_q_blocks=None, num_kv_blocks=None):
        n_q = num_q_blocks or int(blocks.shape[0])
        n_kv = num_kv_blocks or int(blocks.shape[0])
        pairs = _pairs(block_q, block_kv, window, n_q, n_kv)
        pairs = pairs if axis == 0 else pairs.T
        index = np.arange(pairs.shape[1])
        first = np.where(pairs.any(axis=1), np.argmax(pairs, axis=1), pairs.shape[1])
        last = np.where(pairs.any(axis=1), np.max(np.where(pairs, index, -1), axis=1),
                        pairs.shape[1] - 1)
        return jnp.asarray(first, jnp.int32), jnp.asarray(last, jnp.int32)
    return table


@pytest.mark.parametrize("block_q, block_kv, window, n_q, n_kv", GEOMETRIES, ids=IDS)
def test_kv_blocks(impl, block_q, block_kv, window, n_q, n_kv):
    """(first, last) kv block each q block needs."""
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_kv_blocks=n_kv)
    blocks = jnp.arange(n_q, dtype=jnp.int32)
    table = _range_table(0)
    checks.assert_matches_reference(
        impl.band.kv_blocks, (blocks,), kwargs=sizes, require_kernel=False,
        reference=Reference("kv_blocks from the mask", table, table).bind(num_q_blocks=n_q, **sizes),
        names=("first", "last"), note=f"blocks = jnp.arange({n_q})")


@pytest.mark.parametrize("block_q, block_kv, window, n_q, n_kv", GEOMETRIES, ids=IDS)
def test_q_blocks(impl, block_q, block_kv, window, n_q, n_kv):
    """(first, last) q block that needs each kv block; a kv block past every query's keys
    has first > last (its band is empty)."""
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window, num_q_blocks=n_q)
    blocks = jnp.arange(n_kv, dtype=jnp.int32)
    pairs = _pairs(block_q, block_kv, window, n_q, n_kv)
    table = _range_table(1)
    needed = jnp.asarray(pairs.any(axis=0))

    def nonempty_only(first, last):  # an empty band may report any first > last, and only that
        empty = ~needed & (first > last)
        return jnp.where(empty, n_q, first), jnp.where(empty, n_q - 1, last)

    fn = impl.band.q_blocks.derived(lambda f: lambda b, **kw: nonempty_only(*f(b, **kw)),
                                    impl.band.q_blocks.display)
    checks.assert_matches_reference(
        fn, (blocks,), kwargs=sizes, require_kernel=False,
        reference=Reference("q_blocks from the mask", table, table).bind(num_kv_blocks=n_kv, **sizes),
        names=("first", "last"), note=f"blocks = jnp.arange({n_kv})")


def _q_blocks_nonempty(graded, blocks, *, block_q, block_kv, window, num_q_blocks, num_kv_blocks):
    """q_blocks with an empty band's any first > last reported as the table does."""
    first, last = graded(blocks, block_q=block_q, block_kv=block_kv, window=window, num_q_blocks=num_q_blocks)
    needed = jnp.asarray(_pairs(block_q, block_kv, window, num_q_blocks, num_kv_blocks).any(axis=0))
    empty = ~needed & (first > last)
    return jnp.where(empty, num_q_blocks, first), jnp.where(empty, num_q_blocks - 1, last)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): geometries the grader draws, against
    tables read off the mask in the grader's process."""
    block_q, block_kv = int(rng.choice((8, 16, 64, 128, 256))), int(rng.choice((24, 32, 64, 128)))
    window = int(rng.integers(1, 4 * max(block_q, block_kv)))
    n_kv = int(rng.integers(2, 9))
    n_q = int(rng.integers(1, max(1, n_kv * block_kv // block_q) + 1))  # Sq <= Skv, as the forward requires
    sizes = dict(block_q=block_q, block_kv=block_kv, window=window)
    kv_table, q_table = _range_table(0), _range_table(1)
    return [
        checks.trusted.values("kv_blocks", (jnp.arange(n_q, dtype=jnp.int32),), kwargs=dict(num_kv_blocks=n_kv, **sizes),
                              reference=Reference("kv_blocks from the mask", kv_table, kv_table).bind(
                                  num_q_blocks=n_q, num_kv_blocks=n_kv, **sizes), names=("first", "last")),
        checks.trusted.values("q_blocks", (jnp.arange(n_kv, dtype=jnp.int32),), through=_q_blocks_nonempty,
                              kwargs=dict(num_q_blocks=n_q, num_kv_blocks=n_kv, **sizes),
                              reference=Reference("q_blocks from the mask", q_table, q_table).bind(
                                  num_q_blocks=n_q, num_kv_blocks=n_kv, **sizes), names=("first", "last")),
    ]


TRUSTED = checks.trusted.Cases(_trusted_cases)
