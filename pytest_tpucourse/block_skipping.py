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
that computes on them (`poison_unseen_keys`, judged against `seen_keys_reference`;
chapter 13's test_causal_skipping.py and test_backward.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import structure
from .outcomes import WrongResult


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
    # Per grid step, in grid order (last axis fastest): the first element of the block
    # along each axis (steps x axes), and whether that step copies a new block.
    step_starts: np.ndarray = field(default=None, compare=False, repr=False)
    step_copies: np.ndarray = field(default=None, compare=False, repr=False)
    kernel_name: str = ""  # the kernel function's name, where the trace kept it


def kernel_name(eqn) -> str:
    """The name of a pallas_call's kernel function (dq_kernel), or "" where none was kept."""
    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    return eqn.params.get("name") or getattr(info, "func_name", "") or ""


def fetch_log(closed_jaxpr) -> list[OperandFetches]:
    """Every input operand of every pallas_call in a traced program, with its copies.

    Index maps that read scalar-prefetch operands are followed when those operands are
    computed from the program's constants alone (the block tables of a mask known when
    the program is traced, as splash attention builds them).
    """
    from jax.extend import core as jex_core

    log = []
    known = None
    for k, eqn in enumerate(structure.pallas_call_eqns(closed_jaxpr)):
        mapping = eqn.params["grid_mapping"]
        prefetch = []
        if mapping.num_index_operands:
            known = _known_values(closed_jaxpr) if known is None else known
            first = len(eqn.invars) - mapping.num_inputs - mapping.num_index_operands
            prefetch = [var.val if isinstance(var, jex_core.Literal) else known.get(var)
                        for var in eqn.invars[first:first + mapping.num_index_operands]]
        if mapping.num_dynamic_grid_bounds or any(value is None for value in prefetch):
            from .checks import CheckerError

            raise CheckerError("the fetch log cannot follow index maps that read scalar-prefetch "
                               "operands computed at run time, or a dynamic grid")
        grid = tuple(int(g) for g in mapping.grid)
        steps = np.indices(grid).reshape(len(grid), -1) if grid else np.zeros((0, 1), int)
        for position, block in enumerate(mapping.block_mappings[:mapping.num_inputs]):
            indices = _block_indices(block.index_map_jaxpr, steps, prefetch)
            changed = np.concatenate([[True], np.any(indices[1:] != indices[:-1], axis=1)])
            blocks = frozenset(tuple(int(i) for i in row) for row in indices)
            sizes, per_element = zip(*(_block_size(b) for b in block.block_shape))
            step_starts = np.where(np.asarray(per_element, bool), indices, indices * np.asarray(sizes))
            log.append(OperandFetches(
                kernel=k, operand=position, shape=tuple(block.array_aval.shape),
                block_shape=tuple(block.block_shape), grid=grid,
                copies=int(changed.sum()), blocks=blocks, block_sizes=tuple(sizes),
                starts=frozenset(tuple(int(i) for i in row) for row in step_starts),
                step_starts=step_starts, step_copies=changed, kernel_name=kernel_name(eqn)))
    return log


def _block_indices(index_map_jaxpr, steps, prefetch) -> np.ndarray:
    """The block index an index map returns at every grid step: (steps, axes) int array."""
    import jax
    from jax._src.state import discharge as state_discharge  # private in jax 0.10.2

    jaxpr = index_map_jaxpr
    if prefetch:  # the index map reads Refs: discharge them into plain array reads
        jaxpr = state_discharge.discharge_state(jaxpr)
    grid_axes = steps.shape[0]
    n_out = len(index_map_jaxpr.out_avals)

    def index(*args):
        return jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)[:n_out]

    if not grid_axes:
        columns = index(*prefetch)
        return np.asarray([[int(c) for c in columns]]).reshape(1, n_out)
    evaluate = jax.vmap(index, in_axes=(0,) * grid_axes + (None,) * len(prefetch))
    columns = evaluate(*[np.asarray(axis, np.int32) for axis in steps], *prefetch)
    if not n_out:
        return np.zeros((steps.shape[1], 0), int)
    return np.stack([np.broadcast_to(np.asarray(c), steps.shape[1:]) for c in columns], axis=1)


def _known_values(closed_jaxpr) -> dict:
    """The values of a program's variables that follow from its constants alone.

    Walks the program (into calls such as jit and custom_vjp bodies, not into kernels
    or control flow), evaluating every equation whose inputs are all known. The
    arguments are unknown, so only what the program builds from constants is computed:
    the small index tables a kernel's scalar-prefetch operands hold.
    """
    from jax.extend import core as jex_core

    missing = object()

    def read(env, atom):
        return atom.val if isinstance(atom, jex_core.Literal) else env.get(atom, missing)

    def walk(jaxpr, env, found):
        for eqn in jaxpr.eqns:
            args = [read(env, a) for a in eqn.invars]
            if eqn.primitive.name == "pallas_call":
                found.update((v, a) for v, a in zip(eqn.invars, args)
                             if a is not missing and not isinstance(v, jex_core.Literal))
                continue
            subs = list(structure.closed_sub_jaxprs(eqn))
            if len(subs) == 1 and len(subs[0].jaxpr.invars) == len(args):  # a call
                inner = subs[0]
                inner_env = dict(zip(inner.jaxpr.constvars, inner.consts))
                inner_env.update((v, a) for v, a in zip(inner.jaxpr.invars, args) if a is not missing)
                walk(inner.jaxpr, inner_env, found)
                for out, inner_out in zip(eqn.outvars, inner.jaxpr.outvars):
                    value = read(inner_env, inner_out)
                    if value is not missing:
                        env[out] = value
                continue
            if subs or any(a is missing for a in args):
                continue
            try:
                outs = eqn.primitive.bind(*args, **eqn.params)
            except Exception:  # an equation that cannot run on its own: leave it unknown
                continue
            env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))

    found = {}
    walk(closed_jaxpr.jaxpr, dict(zip(closed_jaxpr.jaxpr.constvars, closed_jaxpr.consts)), found)
    return found


def _block_size(dim) -> tuple[int, bool]:
    """(elements per block along one axis, whether the index map returns element offsets)."""
    if dim is None:
        return 1, False
    if isinstance(dim, int):
        return dim, False
    name = type(dim).__name__
    if name == "Squeezed":
        return 1, False
    if name == "Blocked":
        return int(dim.block_size), False
    return int(getattr(dim, "block_size", 1)), True  # Element, BoundedSlice: offsets


def assert_causal_attention_skips_fetches(fn, args, *, kwargs=None, repro: str = "") -> None:
    """No kernel of a top-left causal attention copies a block for a pair the mask empties.

    fn(q, k, v, ...) with q (..., Sq, D) and k, v (..., Skv, D), Sq != Skv; fn may be the
    forward or its gradient, whose program holds the backward's kernels too. In every
    kernel, the operands shaped like q (q, dO, ...) and like k (k, v) are told apart by
    their (length, D) trailing dimensions; at each grid step the first of each says which
    q block (rows) and which kv block (keys) the step works on. An operand whose block
    index changes along the last grid axis streams past the others; each copy of a
    streamed block must serve a step whose (q block, kv block) pair the mask leaves
    non-empty (a key the block holds is at or before a row it meets). The first step of
    each walk along the last axis may copy any block: a kernel may prefetch the block
    its next walk starts on there (JAX's kernels do). A kernel that fetches every block
    and masks it copies blocks above the diagonal in the middle of a walk.

    Sq != Skv keeps q-shaped and k-shaped operands apart; pick a head_dim other than 128,
    which some kernels use for lane-wide row statistics.
    """
    kwargs = kwargs or {}
    q, k = args[0], args[1]
    q_len, kv_len, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    if q_len == kv_len:
        from .checks import CheckerError

        raise CheckerError("assert_causal_attention_skips_fetches needs q_len != kv_len to tell "
                           "q-shaped operands from k-shaped ones")
    suffix = f"\n  reproduce: {repro}" if repro else ""
    log = fetch_log(fn.jaxpr(*args, **kwargs))
    streamed_any = False
    for kernel in sorted({f.kernel for f in log}):
        operands = [f for f in log if f.kernel == kernel]
        q_side = [f for f in operands if f.shape[-2:] == (q_len, head_dim)]
        kv_side = [f for f in operands if f.shape[-2:] == (kv_len, head_dim)]
        if not q_side or not kv_side:
            continue
        rows, keys = q_side[0], kv_side[0]
        axis_q, axis_kv = len(rows.shape) - 2, len(keys.shape) - 2
        row_start, block_q = rows.step_starts[:, axis_q], rows.block_sizes[axis_q]
        key_start = keys.step_starts[:, axis_kv]
        grid = operands[0].grid
        last_axis = np.indices(grid).reshape(len(grid), -1)[-1] if grid else np.zeros(1, int)
        empty = key_start > np.minimum(row_start + block_q, q_len) - 1
        for f, side in [(f, "q") for f in q_side] + [(f, "kv") for f in kv_side]:
            axis = len(f.shape) - 2
            if f.block_sizes[axis] >= f.shape[axis] or not _varies_along_last_axis(f, grid):
                continue  # one block holds the whole length, or the block stays resident
            streamed_any = True
            wasted = np.flatnonzero(f.step_copies & empty & (last_axis > 0))
            if wasted.size:
                raise WrongResult(_wasted_copy_message(fn, f, side, wasted[0], grid, row_start,
                                                       block_q, key_start, keys, q_len, suffix))
    if not streamed_any:
        raise WrongResult(f"{fn.display}: no Pallas kernel walks k and v (or q) block by block "
                          f"along the sequence (blocks shorter than {kv_len} keys or {q_len} "
                          f"rows), so no block above the diagonal can be skipped.{suffix}")


def _varies_along_last_axis(f: OperandFetches, grid) -> bool:
    """Whether the operand's block changes between consecutive steps of the last grid axis."""
    if not grid or grid[-1] < 2:
        return False
    starts = f.step_starts.reshape(*grid, -1)
    return bool(np.any(starts[..., 1:, :] != starts[..., :-1, :]))


def _wasted_copy_message(fn, f, side, step, grid, row_start, block_q, key_start, keys, q_len,
                         suffix) -> str:
    axis = len(f.shape) - 2
    start, size = int(f.step_starts[step, axis]), f.block_sizes[axis]
    first_row, last_row = int(row_start[step]), min(int(row_start[step]) + block_q, q_len) - 1
    first_key = int(key_start[step])
    last_key = first_key + keys.block_sizes[len(keys.shape) - 2] - 1
    point = tuple(int(i) for i in np.unravel_index(step, grid))
    what = (f"the block of keys {start}..{start + size - 1}" if side == "kv"
            else f"the block of rows {start}..{start + size - 1}")
    advice = ("Clamp the k and v index maps at the last kv block the q block needs: the block "
              "index stops changing, and the pipeline copies nothing more." if side == "kv" else
              "Clamp the q-side index maps (q, dO and the row statistics) to the first q block "
              "that sees the kv block: the block index stops changing, and the pipeline copies "
              "nothing more.")
    kernel = f"kernel {f.kernel}" + (f" ({f.kernel_name})" if f.kernel_name else "")
    return (f"{fn.display} copies {what} of {kernel} input {f.operand} {f.shape} "
            f"(blocks of {f.block_sizes}) into VMEM at grid step {point} of {grid}, where "
            f"rows {first_row}..{last_row} meet keys {first_key}..{last_key}: with causal "
            f"masking no row sees any of those keys, so the copy is wasted. {advice}{suffix}")


def poison_unseen_keys(q, k, v):
    """(q, k, v) with NaN in every key no top-left causal query sees (keys Sq.. of Skv).

    A kernel that computes on those keys returns NaN even where it masks them (the masked
    probability is 0, and 0 · NaN is NaN in P·V and in the backward's dS), so only a
    kernel that skips their blocks returns finite values. Needs Sq < Skv.
    """
    import jax.numpy as jnp

    q_len, kv_len = q.shape[-2], k.shape[-2]
    if q_len >= kv_len:
        from .checks import CheckerError

        raise CheckerError(f"poison_unseen_keys needs q_len < kv_len, got {q_len} and {kv_len}")
    unseen = (jnp.arange(kv_len) >= q_len)[:, None]
    return q, jnp.where(unseen, jnp.nan, k), jnp.where(unseen, jnp.nan, v)


def seen_keys_reference(reference, q_len: int):
    """`reference` over only the keys a top-left causal query can see (the first q_len).

    Its outputs are the op's on those keys; its VJP gives the unseen keys zero gradient
    (what a causal kernel must return for them), whatever values they hold.
    """
    from .references import Reference

    def restrict(op):
        def on_seen_keys(q, k, v, **kwargs):
            return op(q, k[..., :q_len, :], v[..., :q_len, :], **kwargs)
        return on_seen_keys

    return Reference(f"{reference.name} over the keys a causal query sees",
                     oracle=restrict(reference.oracle), floor=restrict(reference.floor))


def unconditional_matmuls(closed_jaxpr) -> int:
    """How many dot_generals the kernels of a program run outside any cond (every step)."""
    return sum(count for _, count in _unconditional_matmuls_per_kernel(closed_jaxpr))


def _unconditional_matmuls_per_kernel(closed_jaxpr) -> list[tuple[str, int]]:
    return [(kernel_name(eqn) or f"kernel {k}", _unconditional_dots(eqn.params["jaxpr"]))
            for k, eqn in enumerate(structure.pallas_call_eqns(closed_jaxpr))]


def assert_compute_is_conditional(fn, args, *, kwargs=None, why: str = "",
                                  repro: str = "") -> None:
    """Every matmul in fn's kernels runs under a condition (a grid step can skip it)."""
    kwargs = kwargs or {}
    counts = [(name, n) for name, n in _unconditional_matmuls_per_kernel(fn.jaxpr(*args, **kwargs)) if n]
    if counts:
        where = ", ".join(f"{n} in {name}" for name, n in counts)
        raise WrongResult(
            f"{fn.display} runs {sum(n for _, n in counts)} matmul(s) on every grid step "
            f"({where}): a block that the mask empties is still computed. Put the block's work "
            f"under pl.when(<block needed>)."
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
