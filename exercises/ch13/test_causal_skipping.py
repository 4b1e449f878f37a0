"""Graded tests for ch13.causal_skipping: last_kv_block / first_q_block, and the causal
forward skipping the kv blocks above the diagonal.

Skipping cannot change a value, so it is graded through two effects a kernel that
computes every block and masks it cannot fake:

  - fetches: the blocks each kernel input's index map brings into VMEM, evaluated over
    the grid in its order (pytest_tpucourse.readers.block_skipping): no k or v block may be
    copied for a (q block, kv block) pair the mask empties, with equal and unequal
    block sizes;
  - poison: with q_len < kv_len, keys from q_len on are seen by no query (top-left
    alignment); they are NaN here, and a kernel that computes on them returns NaN
    (0 · NaN is NaN in P·V). The matmuls must also sit under a condition.
"""

import dataclasses

import jax.numpy as jnp
import pytest

from pytest_tpucourse import ir, checks, references
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.references import Reference

BLOCKS = dict(block_q=128, block_kv=128)
Q_TWICE_KV, KV_TWICE_Q = tst.unequal_blocks(("block_q", "block_kv"), (256, 128))
# q blocks 0..3 need kv blocks 0..3; kv blocks 4..7 (keys 512..1023) are never needed.
POISONED = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=1024, head_dim=64,
                               causal=True, dtype="float32")
# More queries than keys: rows 512.. see every key; the diagonal crosses the first blocks.
# (The fetch log tells q-shaped operands from k-shaped ones by their lengths, so no case
# is square.)
TALLER = dataclasses.replace(POISONED, q_len=768, kv_len=512)
BLOCK_SIZES = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 384), (384, 128), (256, 96)]


def _needed(q_blocks, kv_blocks, *, block_q, block_kv):
    """[i, j]: does some row of q block i see some key of kv block j? (key <= row, top-left)"""
    last_row = (q_blocks[:, None] + 1) * block_q - 1
    first_key = kv_blocks[None, :] * block_kv
    return first_key <= last_row


def _last_kv_block_table(q_blocks, *, block_q, block_kv):
    """From the mask: the highest kv block that q block i needs."""
    kv_blocks = jnp.arange(64 * 8, dtype=jnp.int32)
    needed = _needed(q_blocks, kv_blocks, block_q=block_q, block_kv=block_kv)
    return jnp.max(jnp.where(needed, kv_blocks[None, :], -1), axis=1).astype(jnp.int32)


def _first_q_block_table(kv_blocks, *, block_q, block_kv):
    """From the mask: the lowest q block that needs kv block j."""
    q_blocks = jnp.arange(64 * 8, dtype=jnp.int32)
    needed = _needed(q_blocks, kv_blocks, block_q=block_q, block_kv=block_kv)
    return jnp.min(jnp.where(needed, q_blocks[:, None], 1 << 30), axis=0).astype(jnp.int32)


def _table_reference(table):
    return Reference(table.__name__, oracle=table, floor=table)


@pytest.mark.parametrize("function, table", [("last_kv_block", _last_kv_block_table),
                                             ("first_q_block", _first_q_block_table)])
@pytest.mark.parametrize("block_q, block_kv", BLOCK_SIZES)
def test_block_arithmetic(impl, function, table, block_q, block_kv):
    """Blocks 0..15, as traced int32 block indices (the way an index map passes them),
    against a table read off the mask itself."""
    blocks = jnp.arange(16, dtype=jnp.int32)
    sizes = dict(block_q=block_q, block_kv=block_kv)
    checks.assert_matches_reference(
        getattr(impl.causal_skipping, function), (blocks,), kwargs=sizes, require_kernel=False,
        reference=_table_reference(table).bind(**sizes))


@pytest.mark.parametrize("blocks", [BLOCKS, Q_TWICE_KV, KV_TWICE_Q],
                         ids=["128-128", "256-128", "128-256"])
@pytest.mark.parametrize("cfg", [POISONED, TALLER], ids=["q_len<kv_len", "q_len>kv_len"])
def test_causal_forward_never_fetches_blocks_above_the_diagonal(impl, cfg, blocks):
    """The blocks each kernel input's index map brings into VMEM, over the grid in its
    order: no k or v block copied for a q block that sees none of its keys (past the
    diagonal, or past the keys any query sees)."""
    q, k, v = cfg.arrays(0)
    ir.assert_causal_attention_skips_fetches(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=True, **blocks), note=str(cfg))


def test_causal_forward_never_computes_blocks_above_the_diagonal(impl):
    q, k, v = POISONED.arrays(1)
    ir.assert_compute_is_conditional(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=True, **BLOCKS),
        why="Blocks wholly above the diagonal contribute nothing; computing and masking "
            "them costs as much as non-causal attention.")


@pytest.mark.parametrize("blocks", [BLOCKS, KV_TWICE_Q], ids=["128-128", "128-256"])
def test_causal_forward_ignores_poisoned_blocks_above_the_diagonal(impl, blocks):
    q, k, v = ir.poison_unseen_keys(*POISONED.arrays(2))
    reference = ir.seen_keys_reference(references.ATTENTION_WITH_LSE, POISONED.q_len)
    checks.assert_matches_reference(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=True, **blocks),
        reference=reference.bind(causal=True), names=("out", "lse"),
        note=f"k and v are NaN from key {POISONED.q_len} on, where no causal query looks: {POISONED}")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): the block arithmetic on block sizes
    and indices the grader draws (what the forward fetches and computes is the tree's own
    process's to see)."""
    cases = []
    for function, table in (("last_kv_block", _last_kv_block_table), ("first_q_block", _first_q_block_table)):
        block_q, block_kv = BLOCK_SIZES[int(rng.integers(len(BLOCK_SIZES)))]
        blocks = jnp.asarray(rng.permutation(32)[:16], jnp.int32)
        sizes = dict(block_q=block_q, block_kv=block_kv)
        cases.append(checks.trusted.values(function, (blocks,), kwargs=sizes,
                                           reference=_table_reference(table).bind(**sizes)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
