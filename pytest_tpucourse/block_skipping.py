"""What a kernel fetches and computes, read off its BlockSpecs and its body.

A kernel that skips work the mask makes useless (causal attention's blocks above
the diagonal) gives the same values as one that computes everything and masks it,
so values cannot grade skipping. Two observable effects can:

  - fetches: the pipeline copies an operand's block into VMEM at every grid step
    whose block index differs from the previous step's (a repeated index is not
    copied again). Evaluating each BlockSpec's index map over the grid, in the
    grid's order (last axis fastest), gives every copy the kernel will issue,
    without running it. `fetch_log` does that.
  - compute: a block that is skipped runs its matmuls under a condition
    (`pl.when`, `lax.cond`); `unconditional_matmuls` finds the ones that run on
    every grid step.

Graded tests also poison never-needed blocks with NaN, which catches a kernel
that computes on them (chapter 13, test_causal_skipping.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import jax_internals, structure
from .outcomes import CheckerError, WrongResult


@dataclass(frozen=True)
class OperandFetches:
    """The blocks of one kernel operand that its index map brings into VMEM."""

    kernel: int  # position of the pallas_call in the traced program
    operand: int  # position among the kernel's inputs
    shape: tuple[int, ...]
    block_shape: tuple
    grid: tuple[int, ...]
    copies: int  # block copies over the whole grid
    blocks: frozenset  # the distinct block indices copied
    block_sizes: tuple[int, ...]  # elements per block along each axis (1 where squeezed)
    starts: frozenset  # the first element of each block copied, per axis


def fetch_log(closed_jaxpr) -> list[OperandFetches]:
    """Every input operand of every pallas_call in a traced program, with its copies."""
    import jax

    log = []
    for k, eqn in enumerate(structure.pallas_call_eqns(closed_jaxpr)):
        grid, inputs, reads_operands = jax_internals.grid_and_inputs(eqn)
        if reads_operands:
            raise CheckerError("the fetch log cannot follow index maps that read scalar-prefetch "
                               "operands or a dynamic grid")
        steps = np.indices(grid).reshape(len(grid), -1) if grid else np.zeros((0, 1), int)
        for position, block in enumerate(inputs):
            index_map = block.index_map
            evaluate = jax.vmap(lambda *g, m=index_map: jax.core.eval_jaxpr(m.jaxpr, m.consts, *g))
            columns = evaluate(*[np.asarray(axis, np.int32) for axis in steps]) if grid else []
            indices = np.stack([np.broadcast_to(np.asarray(c), steps.shape[1:]) for c in columns],
                               axis=1) if len(columns) else np.zeros((steps.shape[1], 0), int)
            changed = np.any(indices[1:] != indices[:-1], axis=1)
            blocks = frozenset(tuple(int(i) for i in row) for row in indices)
            sizes, per_element = zip(*(jax_internals.block_dim(b) for b in block.block_shape))
            log.append(OperandFetches(
                kernel=k, operand=position, shape=block.array_shape,
                block_shape=block.block_shape, grid=grid,
                copies=1 + int(changed.sum()), blocks=blocks, block_sizes=tuple(sizes),
                starts=frozenset(tuple(i if element else i * size
                                       for i, size, element in zip(b, sizes, per_element))
                                 for b in blocks)))
    return log


def assert_causal_attention_skips_fetches(fn, args, *, kwargs=None, repro: str = "") -> None:
    """A top-left causal attention fn(q, k, v, ...) never copies a k or v block above the diagonal.

    q (B, H, Sq, D), k and v (B, Hkv, Skv, D). In every kernel that reads k or v block by
    block (a block size along the key axis below Skv): no block may start at a key >= Sq
    (no query sees it), and there may be at most one copy per (query head, q block, kv
    block) pair the mask leaves non-empty, with the block sizes the kernel itself uses.
    A kernel that fetches every block and masks it copies all of them.
    """
    kwargs = kwargs or {}
    q, k = args[0], args[1]
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    suffix = f"\n  reproduce: {repro}" if repro else ""
    log = fetch_log(fn.jaxpr(*args, **kwargs))
    streamed = [f for f in log if f.shape == tuple(k.shape) and f.block_sizes[2] < kv_len]
    if not streamed:
        raise WrongResult(f"{fn.display}: no Pallas kernel reads k and v block by block along "
                          f"the keys (blocks shorter than {kv_len}).{suffix}")
    for f in streamed:
        where = f"kernel {f.kernel} input {f.operand} {f.shape} in blocks of {f.block_sizes}"
        unseen = sorted(start[2] for start in f.starts if start[2] >= q_len)
        if unseen:
            raise WrongResult(
                f"{fn.display} copies the block of keys {unseen[0]}..{unseen[0] + f.block_sizes[2] - 1} "
                f"of {where} into VMEM; with causal masking no query (0..{q_len - 1}) sees it. "
                f"Clamp the k and v index maps at the last kv block the q block needs: the "
                f"block index stops changing, and the pipeline copies nothing more.{suffix}")
        q_operands = [g for g in log if g.kernel == f.kernel and g.shape == tuple(q.shape)]
        block_q = q_operands[0].block_sizes[2] if q_operands else q_len
        block_kv = f.block_sizes[2]
        needed = batch * heads * sum(min(((i + 1) * block_q - 1) // block_kv, kv_len // block_kv - 1) + 1
                                     for i in range(-(-q_len // block_q)))
        if f.copies > needed:
            raise WrongResult(
                f"{fn.display} copies {f.copies} blocks of {where} over its grid {f.grid}; "
                f"causal attention needs at most {needed} (one per query head, q block of "
                f"{block_q} and kv block of {block_kv} that the mask does not empty). The blocks "
                f"above the diagonal are still fetched.{suffix}")


def unconditional_matmuls(closed_jaxpr) -> int:
    """How many dot_generals the kernels of a program run outside any cond (every step)."""
    count = 0
    for eqn in structure.pallas_call_eqns(closed_jaxpr):
        count += _unconditional_dots(jax_internals.kernel_jaxpr(eqn))
    return count


def assert_compute_is_conditional(fn, args, *, kwargs=None, why: str = "",
                                  repro: str = "") -> None:
    """Every matmul in fn's kernels runs under a condition (a grid step can skip it)."""
    kwargs = kwargs or {}
    count = unconditional_matmuls(fn.jaxpr(*args, **kwargs))
    if count:
        raise WrongResult(
            f"{fn.display} runs {count} matmul(s) on every grid step: a block that the mask "
            f"empties is still computed. Put the block's work under pl.when(<block needed>)."
            + (f"\n  {why}" if why else "") + (f"\n  reproduce: {repro}" if repro else ""))


def _unconditional_dots(jaxpr) -> int:
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            count += 1
        elif eqn.primitive.name == "cond":
            continue  # whatever runs inside a branch is conditional
        else:
            for sub in structure.sub_jaxprs(eqn):
                count += _unconditional_dots(sub)
    return count
