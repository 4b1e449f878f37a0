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

from dataclasses import dataclass, field

import numpy as np

from ..core import jax_internals
from . import traced_program
from ..core.outcomes import CheckerError, WrongResult
from .reproduction import of_program_check


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


def fetch_log(closed_jaxpr) -> list[OperandFetches]:
    """Every input operand of every pallas_call in a traced program, with its copies.

    Index maps that read scalar-prefetch operands are followed when those operands are
    computed from the program's constants alone (the block tables of a mask known when
    the program is traced, as splash attention builds them).
    """
    log = []
    known = None
    for k, eqn in enumerate(traced_program.pallas_call_eqns(closed_jaxpr)):
        kernel = jax_internals.kernel_grid(eqn)
        prefetch = []
        if kernel.prefetch_vars:
            known = _known_values(closed_jaxpr) if known is None else known
            prefetch = [jax_internals.literal_value(var, known.get(var)) for var in kernel.prefetch_vars]
        if kernel.dynamic_grid or any(value is None for value in prefetch):
            raise CheckerError("the fetch log cannot follow index maps that read scalar-prefetch "
                               "operands computed at run time, or a dynamic grid")
        for position, block in enumerate(kernel.inputs):
            indices = block_indices(block, kernel.grid, prefetch)
            changed = np.concatenate([[True], np.any(indices[1:] != indices[:-1], axis=1)])
            blocks = frozenset(tuple(int(i) for i in row) for row in indices)
            sizes, per_element = zip(*(jax_internals.block_dim(b) for b in block.block_shape))
            step_starts = np.where(np.asarray(per_element, bool), indices, indices * np.asarray(sizes))
            log.append(OperandFetches(
                kernel=k, operand=position, shape=block.array_shape,
                block_shape=block.block_shape, grid=kernel.grid,
                copies=int(changed.sum()), blocks=blocks, block_sizes=tuple(sizes),
                starts=frozenset(tuple(int(i) for i in row) for row in step_starts),
                step_starts=step_starts, step_copies=changed, kernel_name=jax_internals.kernel_name(eqn)))
    return log


def block_indices(block: jax_internals.OperandBlocks, grid: tuple[int, ...], prefetch=()) -> np.ndarray:
    """The block index one operand's index map gives at every grid step, in the grid's
    order (last axis fastest): an array (steps, array dims). prefetch: the values of the
    scalar-prefetch operands it reads; dynamic grids are the caller's to refuse."""
    return _evaluate_index_map(block.index_map, _grid_steps(grid), prefetch)


def _grid_steps(grid: tuple[int, ...]) -> np.ndarray:
    """Every grid point in the grid's order (last axis fastest), as (grid axes, points);
    a grid of no axes has one point."""
    return np.indices(grid).reshape(len(grid), -1) if grid else np.zeros((0, 1), int)


def _static_grids(closed_jaxpr, what: str):
    """(position, jax_internals.KernelGrid) of each pallas_call, whose index maps must read only
    the grid."""
    for k, eqn in enumerate(traced_program.pallas_call_eqns(closed_jaxpr)):
        kernel = jax_internals.kernel_grid(eqn)
        if not kernel.static:
            raise CheckerError(f"{what} cannot follow index maps that read scalar-prefetch "
                               f"operands or a dynamic grid")
        yield k, kernel


def _evaluate_index_map(index_map, steps: np.ndarray, prefetch=()) -> np.ndarray:
    """The block index an index map returns at each grid point: steps is (grid axes, points);
    the result a (points, block axes) int array. prefetch: the scalar-prefetch values it reads."""
    import jax

    jaxpr = jax_internals.discharge_state(index_map) if prefetch else index_map
    n_out = len(index_map.out_avals)
    points = steps.shape[1]

    def index(*args):
        return jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args)[:n_out]

    if not n_out or not points:
        return np.zeros((points, n_out), int)
    if not steps.shape[0]:
        columns = index(*prefetch)
        return np.tile(np.asarray([[int(np.asarray(c)) for c in columns]]), (points, 1))
    evaluate = jax.vmap(index, in_axes=(0,) * steps.shape[0] + (None,) * len(prefetch))
    columns = evaluate(*[np.asarray(axis, np.int32) for axis in steps], *prefetch)
    return np.stack([np.broadcast_to(np.asarray(c), (points,)) for c in columns], axis=1).astype(int)


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
            subs = list(traced_program.closed_sub_jaxprs(eqn))
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
                outs = eqn.primitive.bind(*args, **jax_internals.equation_params(eqn))
            except Exception:  # an equation that cannot run on its own: leave it unknown
                continue
            env.update(zip(eqn.outvars, outs if eqn.primitive.multiple_results else [outs]))

    found = {}
    walk(closed_jaxpr.jaxpr, dict(zip(closed_jaxpr.jaxpr.constvars, closed_jaxpr.consts)), found)
    return found


def assert_causal_attention_skips_fetches(fn, args, *, kwargs=None, note: str = "") -> None:
    """No kernel of a top-left causal attention copies a block for a pair the mask empties
    (assert_attention_skips_fetches with the causal mask: no key after the block's last row)."""
    assert_attention_skips_fetches(fn, args, kwargs=kwargs, note=note, mask="causal masking",
                                   empty=lambda first_row, last_row, first_key, last_key:
                                   first_key > last_row)


def sliding_window_empty(window: int):
    """`empty` for a sliding window: rows r see keys r - window < c <= r."""
    return lambda first_row, last_row, first_key, last_key: (
        (first_key > last_row) | (last_key <= first_row - window))


BAND_ADVICE = ("Clamp the k and v index maps into the band of kv blocks the q block needs: past "
               "its last block the block index stops changing, and the pipeline copies nothing "
               "more.",
               "Clamp the q-side index maps (q, dO and the row statistics) into the band of q "
               "blocks that see the kv block: past its last block the block index stops "
               "changing, and the pipeline copies nothing more.")


def assert_attention_skips_fetches(fn, args, *, empty, mask: str, kwargs=None, note: str = "",
                                   advice: tuple[str, str] | None = None) -> None:
    """No kernel of an attention fn copies a block for a pair of blocks the mask empties.

    empty(first_row, last_row, first_key, last_key), on arrays of the blocks' bounds
    (inclusive): True where no row of the q block sees any key of the kv block. mask: the
    mask's name in the message ("causal masking"). advice: (for a wasted k/v copy, for a
    wasted q-side copy), the causal advice when None (BAND_ADVICE for a band).

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
        raise CheckerError("assert_attention_skips_fetches needs q_len != kv_len to tell "
                           "q-shaped operands from k-shaped ones")
    suffix = of_program_check(fn, args, kwargs, note)
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
        last_axis = _grid_steps(grid)[-1] if grid else np.zeros(1, int)
        block_kv = keys.block_sizes[axis_kv]
        empty_pair = np.asarray(empty(row_start, np.minimum(row_start + block_q, q_len) - 1,
                                      key_start, np.minimum(key_start + block_kv, kv_len) - 1))
        for f, side in [(f, "q") for f in q_side] + [(f, "kv") for f in kv_side]:
            axis = len(f.shape) - 2
            if f.block_sizes[axis] >= f.shape[axis] or not _varies_along_last_axis(f, grid):
                continue  # one block holds the whole length, or the block stays resident
            streamed_any = True
            wasted = np.flatnonzero(f.step_copies & empty_pair & (last_axis > 0))
            if wasted.size:
                raise WrongResult(_wasted_copy_message(fn, f, side, wasted[0], grid, row_start,
                                                       block_q, key_start, keys, q_len, mask,
                                                       advice, suffix))
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
                         mask, advice, suffix) -> str:
    axis = len(f.shape) - 2
    start, size = int(f.step_starts[step, axis]), f.block_sizes[axis]
    first_row, last_row = int(row_start[step]), min(int(row_start[step]) + block_q, q_len) - 1
    first_key = int(key_start[step])
    last_key = first_key + keys.block_sizes[len(keys.shape) - 2] - 1
    point = tuple(int(i) for i in np.unravel_index(step, grid))
    what = (f"the block of keys {start}..{start + size - 1}" if side == "kv"
            else f"the block of rows {start}..{start + size - 1}")
    causal = ("Clamp the k and v index maps at the last kv block the q block needs: the block "
              "index stops changing, and the pipeline copies nothing more.",
              "Clamp the q-side index maps (q, dO and the row statistics) to the first q block "
              "that sees the kv block: the block index stops changing, and the pipeline copies "
              "nothing more.")
    advice = (advice or causal)[0 if side == "kv" else 1]
    kernel = f"kernel {f.kernel}" + (f" ({f.kernel_name})" if f.kernel_name else "")
    return (f"{fn.display} copies {what} of {kernel} input {f.operand} {f.shape} "
            f"(blocks of {f.block_sizes}) into VMEM at grid step {point} of {grid}, where "
            f"rows {first_row}..{last_row} meet keys {first_key}..{last_key}: with {mask} "
            f"no row sees any of those keys, so the copy is wasted. {advice}{suffix}")


def poison_unseen_keys(q, k, v):
    """(q, k, v) with NaN in every key no top-left causal query sees (keys Sq.. of Skv).

    A kernel that computes on those keys returns NaN even where it masks them (the masked
    probability is 0, and 0 · NaN is NaN in P·V and in the backward's dS), so only a
    kernel that skips their blocks returns finite values. Needs Sq < Skv.
    """
    import jax.numpy as jnp

    q_len, kv_len = q.shape[-2], k.shape[-2]
    if q_len >= kv_len:
        raise CheckerError(f"poison_unseen_keys needs q_len < kv_len, got {q_len} and {kv_len}")
    unseen = (jnp.arange(kv_len) >= q_len)[:, None]
    return q, jnp.where(unseen, jnp.nan, k), jnp.where(unseen, jnp.nan, v)


def seen_keys_reference(reference, q_len: int):
    """`reference` over only the keys a top-left causal query can see (the first q_len).

    Its outputs are the op's on those keys; its VJP gives the unseen keys zero gradient
    (what a causal kernel must return for them), whatever values they hold.
    """
    from ..references import Reference

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
    return [(jax_internals.kernel_name(eqn) or f"kernel {k}", _unconditional_dots(jax_internals.kernel_jaxpr(eqn)))
            for k, eqn in enumerate(traced_program.pallas_call_eqns(closed_jaxpr))]


def assert_compute_is_conditional(fn, args, *, kwargs=None, why: str = "",
                                  note: str = "") -> None:
    """Every matmul in fn's kernels runs under a condition (a grid step can skip it)."""
    kwargs = kwargs or {}
    suffix = of_program_check(fn, args, kwargs, note)
    counts = [(name, n) for name, n in _unconditional_matmuls_per_kernel(fn.jaxpr(*args, **kwargs)) if n]
    if counts:
        where = ", ".join(f"{n} in {name}" for name, n in counts)
        raise WrongResult(
            f"{fn.display} runs {sum(n for _, n in counts)} matmul(s) on every grid step "
            f"({where}): a block that the mask empties is still computed. Put the block's work "
            f"under pl.when(<block needed>)."
            + (f"\n  {why}" if why else "") + suffix)


def _unconditional_dots(jaxpr) -> int:
    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            count += 1
        elif eqn.primitive.name == "cond":
            continue  # whatever runs inside a branch is conditional
        else:
            for sub in traced_program.sub_jaxprs(eqn):
                count += _unconditional_dots(sub)
    return count


# ---------------------------------------------------------------- the whole pipeline schedule


@dataclass(frozen=True)
class OperandSchedule:
    """What the pipeline moves for one operand of one kernel: copies in, or write-backs out.

    An input block is copied from HBM at the first step and whenever its block index
    differs from the previous step's; an output block is written back at the last step
    and whenever the next step's index differs. `nbytes` counts the in-bounds part of
    each block moved (a ragged edge block is partly padding, which is not the array's
    data); `revisited` lists output blocks the grid leaves and later comes back to.
    """

    kernel: int
    kind: str  # "input" or "output"
    operand: int  # position among the kernel's inputs, or among its outputs
    transfers: tuple  # ((grid point, block index), ...) in the order the grid runs
    nbytes: int
    revisited: tuple  # sorted block indices (outputs only)


def pipeline_schedule(closed_jaxpr, order=None) -> list[OperandSchedule]:
    """Every operand of every pallas_call in a traced program, with what the pipeline moves.

    order: the grid points in the order they run (say, recorded by TPU interpret mode);
    None: the TPU's order, a loop nest with the last axis fastest.
    """
    schedules = []
    for k, kernel in _static_grids(closed_jaxpr, "the pipeline schedule"):
        points = ([tuple(int(i) for i in p) for p in order] if order is not None else
                  [tuple(int(i) for i in p) for p in np.ndindex(*kernel.grid)])
        for block in kernel.inputs + kernel.outputs:
            is_input = block.is_input
            indices = _block_indices(block, points)
            last = len(points) - 1
            moved = [s for s in range(len(points))
                     if (s == 0 or indices[s] != indices[s - 1] if is_input else
                         s == last or indices[s] != indices[s + 1])]
            sizes = [jax_internals.block_dim(b) for b in block.block_shape]
            shape, itemsize = block.array_shape, np.dtype(block.dtype).itemsize
            written = [indices[s] for s in moved]
            schedules.append(OperandSchedule(
                kernel=k, kind="input" if is_input else "output",
                operand=block.position,
                transfers=tuple((points[s], indices[s]) for s in moved),
                nbytes=sum(_in_bounds(indices[s], sizes, shape) for s in moved) * itemsize,
                revisited=() if is_input else tuple(sorted({b for b in written if written.count(b) > 1}))))
    return schedules


def _block_indices(block: jax_internals.OperandBlocks, points) -> list[tuple[int, ...]]:
    """One operand's index map, evaluated at each grid point."""
    steps = np.asarray(points, int).reshape(len(points), -1).T
    return [tuple(int(i) for i in row) for row in _evaluate_index_map(block.index_map, steps)]


def _in_bounds(index, sizes, shape) -> int:
    """Elements of the block at `index` that lie inside an array of `shape`; sizes holds
    jax_internals.block_dim's (elements per block, index is an element offset) for each axis."""
    count = 1
    for i, (size, per_element), dim in zip(index, sizes, shape):
        start = i if per_element else i * size
        count *= max(0, min(start + size, dim) - start)
    return count
