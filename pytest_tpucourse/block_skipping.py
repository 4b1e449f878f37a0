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
    log = []
    for k, kernel in _static_grids(closed_jaxpr, "the fetch log"):
        for position, block in enumerate(kernel.inputs):
            indices = block_indices(block, kernel.grid)
            changed = np.any(indices[1:] != indices[:-1], axis=1)
            blocks = frozenset(tuple(int(i) for i in row) for row in indices)
            sizes, per_element = zip(*(jax_internals.block_dim(b) for b in block.block_shape))
            log.append(OperandFetches(
                kernel=k, operand=position, shape=block.array_shape,
                block_shape=block.block_shape, grid=kernel.grid,
                copies=1 + int(changed.sum()), blocks=blocks, block_sizes=tuple(sizes),
                starts=frozenset(tuple(i if element else i * size
                                       for i, size, element in zip(b, sizes, per_element))
                                 for b in blocks)))
    return log


def block_indices(block: jax_internals.OperandBlocks, grid: tuple[int, ...]) -> np.ndarray:
    """The block index one operand's index map gives at every grid step, in the grid's
    order (last axis fastest): an array (steps, array dims). Scalar-prefetch operands and
    dynamic grids are the caller's to refuse."""
    points = list(np.ndindex(*grid)) if grid else [()]
    return np.asarray(_block_indices(block, points), dtype=int).reshape(len(points), -1)


def _static_grids(closed_jaxpr, what: str):
    """(position, jax_internals.KernelGrid) of each pallas_call, whose index maps must read only
    the grid."""
    for k, eqn in enumerate(structure.pallas_call_eqns(closed_jaxpr)):
        kernel = jax_internals.kernel_grid(eqn)
        if not kernel.static:
            raise CheckerError(f"{what} cannot follow index maps that read scalar-prefetch "
                               f"operands or a dynamic grid")
        yield k, kernel


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


def assert_fetches_meet_the_mask(fn, args, *, needed, kwargs=None, repro: str = "") -> None:
    """Every block of q rows or of keys that fn's kernels stream into VMEM meets the mask.

    args start with q (B, H, Sq, D) and k (B, H, Skv, D), Sq != Skv so the two are told
    apart by shape. needed(rows, keys) -> bool: does some (row, key) pair of these two
    `range`s survive the mask. In each kernel, the operand of the pair whose block index
    moves along the grid's last axis streams; every copy of it (a step where its block
    index changes) must pair it with a block of the other that it shares an allowed pair
    with. A kernel that walks every block and masks it copies blocks the mask empties.
    """
    kwargs = kwargs or {}
    q, k = args[0], args[1]
    suffix = f"\n  reproduce: {repro}" if repro else ""
    if tuple(q.shape) == tuple(k.shape):
        raise CheckerError("assert_fetches_meet_the_mask needs q and k of different lengths")
    checked = 0
    for _, kernel in _static_grids(fn.jaxpr(*args, **kwargs), "the fetch check"):
        rows_ops = [b for b in kernel.inputs if b.array_shape == tuple(q.shape)]
        keys_ops = [b for b in kernel.inputs if b.array_shape == tuple(k.shape)]
        for a, b in ((r, c) for r in rows_ops for c in keys_ops):
            ia, ib = block_indices(a, kernel.grid), block_indices(b, kernel.grid)
            size_a, size_b = (jax_internals.block_dim(x.block_shape[2])[0] for x in (a, b))
            last_axis = np.array([p[-1] for p in np.ndindex(*kernel.grid)]) > 0
            moves_a = np.any(ia[1:] != ia[:-1], axis=1) & last_axis[1:]
            moves_b = np.any(ib[1:] != ib[:-1], axis=1) & last_axis[1:]
            streamed, indices = (a, ia) if moves_a.any() and not moves_b.any() else (b, ib)
            if not (moves_a.any() or moves_b.any()):
                continue
            copies = np.concatenate([[True], np.any(indices[1:] != indices[:-1], axis=1)])
            for step in np.flatnonzero(copies):
                r0, c0 = int(ia[step][2]) * size_a, int(ib[step][2]) * size_b
                checked += 1
                if not needed(range(r0, r0 + size_a), range(c0, c0 + size_b)):
                    what = "q rows" if streamed is a else "keys"
                    raise WrongResult(
                        f"{fn.display} copies the block of {what} "
                        f"{(r0 if streamed is a else c0)}..{(r0 + size_a if streamed is a else c0 + size_b) - 1} "
                        f"into VMEM next to rows {r0}..{r0 + size_a - 1} and keys "
                        f"{c0}..{c0 + size_b - 1}, which the mask leaves no pair of: the block is "
                        f"fetched for nothing. Clamp the index map to the blocks the mask needs: "
                        f"a block index that stops changing issues no copy.{suffix}")
    if not checked:
        raise WrongResult(f"{fn.display}: no Pallas kernel streams blocks of q rows against blocks "
                          f"of keys.{suffix}")


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
    import jax

    index_map = block.index_map
    if not points or not points[0]:  # no grid: one step, block (0, ...)
        return [tuple(int(np.asarray(c)) for c in jax.core.eval_jaxpr(index_map.jaxpr, index_map.consts))
                for _ in points]
    coords = np.asarray(points, np.int32).T
    columns = jax.vmap(lambda *g: jax.core.eval_jaxpr(index_map.jaxpr, index_map.consts, *g))(*coords)
    table = np.stack([np.broadcast_to(np.asarray(c), coords.shape[1:]) for c in columns], axis=1)
    return [tuple(int(i) for i in row) for row in table]


def _in_bounds(index, sizes, shape) -> int:
    """Elements of the block at `index` that lie inside an array of `shape`; sizes holds
    jax_internals.block_dim's (elements per block, index is an element offset) for each axis."""
    count = 1
    for i, (size, per_element), dim in zip(index, sizes, shape):
        start = i if per_element else i * size
        count *= max(0, min(start + size, dim) - start)
    return count


def assert_schedule_matches(fn, grid, in_specs, out_specs, in_shapes, out_shapes, *,
                            hbm_bytes: int | None = None, record: bool = True,
                            repro: str = "") -> None:
    """fn(grid, in_specs, out_specs, in_shapes, out_shapes) must return the schedule the
    pipeline runs: `.copies` per input and `.write_backs` per output as lists of (grid
    point, block index), `.hbm_bytes`, and `.revisited` output blocks per output.

    The truth is `pipeline_schedule` of a pallas_call built from the same BlockSpecs, in
    the order TPU interpret mode records its grid points (`grid_point_recorder`); a grid
    that revisits an output block cannot run there (the interpreter refuses it), and is
    read in the TPU's order instead. hbm_bytes: a closed form the pipeline's bytes must
    equal (the test's own arithmetic, checked against the truth first). record=False
    reads the TPU's order without running the interpreter (a compile saved where a
    closed form already vouches for the truth).
    """
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    from . import tpu_checks
    from .checks import graded

    suffix = f"\n  reproduce: {repro}" if repro else ""

    def zero_outputs(*refs):
        for ref in refs[len(in_specs):]:
            ref[...] = jnp.zeros(ref.shape, ref.dtype)

    def kernel(*arrays):
        return pl.pallas_call(zero_outputs, grid=grid, in_specs=list(in_specs),
                              out_specs=list(out_specs), out_shape=list(out_shapes))(*arrays)

    arrays = [jnp.zeros(s.shape, s.dtype) for s in in_shapes]
    closed = jax.make_jaxpr(kernel)(*arrays)
    truth = pipeline_schedule(closed)
    if record and not any(s.revisited for s in truth):
        recorded = tpu_checks.recorded_grid_points(graded(kernel, "the pipeline"), *arrays)
        truth = pipeline_schedule(closed, order=[point for point, _ in recorded])
    if hbm_bytes is not None and hbm_bytes != sum(s.nbytes for s in truth):
        from .checks import CheckerError

        raise CheckerError(f"the test's closed form gives {hbm_bytes:,} HBM bytes, the pipeline "
                           f"moves {sum(s.nbytes for s in truth):,}")
    inputs = [s for s in truth if s.kind == "input"]
    outputs = [s for s in truth if s.kind == "output"]

    got = fn(tuple(grid), list(in_specs), list(out_specs), list(in_shapes), list(out_shapes))
    fields = ("copies", "write_backs", "hbm_bytes", "revisited")
    if not all(hasattr(got, f) for f in fields):
        raise WrongResult(f"{fn.display} returned {type(got).__name__}; expected a Schedule with "
                          f"fields {', '.join(fields)}.{suffix}")
    for field, kind, expected in (("copies", "input", inputs), ("write_backs", "output", outputs)):
        listed = _as_transfers(fn, field, getattr(got, field), len(expected), suffix)
        for n, (mine, want) in enumerate(zip(listed, expected)):
            _compare_transfers(fn, f"{field}[{n}] ({kind} {n})", mine, list(want.transfers), suffix)
    revisited = _as_transfers(fn, "revisited", got.revisited, len(outputs), suffix, pairs=False)
    for n, (mine, want) in enumerate(zip(revisited, outputs)):
        if sorted(mine) != list(want.revisited):
            raise WrongResult(f"{fn.display}: revisited[{n}] is {sorted(mine)}; the grid comes back "
                              f"to {list(want.revisited) or 'no block'} of output {n} after leaving "
                              f"it.{suffix}")
    total = sum(s.nbytes for s in truth)
    if not _is_int(got.hbm_bytes) or int(got.hbm_bytes) != total:
        detail = ", ".join(f"{s.kind} {s.operand}: {s.nbytes:,}" for s in truth)
        raise WrongResult(f"{fn.display}: hbm_bytes is {got.hbm_bytes!r}; the pipeline moves "
                          f"{total:,} bytes ({detail}), counting the in-bounds part of each block "
                          f"it copies or writes back.{suffix}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _as_transfers(fn, field, value, count, suffix, pairs=True) -> list[list]:
    """The learner's per-operand lists, with every index as a tuple of ints."""
    try:
        lists = list(value)
        if len(lists) != count:
            raise ValueError
        if pairs:
            return [[(tuple(int(i) for i in p), tuple(int(i) for i in b)) for p, b in per] for per in lists]
        return [[tuple(int(i) for i in b) for b in per] for per in lists]
    except (TypeError, ValueError):
        shape = "(grid point, block index) pairs" if pairs else "block indices"
        raise WrongResult(f"{fn.display}: {field} should be a list of {count} lists of {shape}, "
                          f"one list per operand; got {value!r:.200}.{suffix}") from None


def _compare_transfers(fn, what, mine, want, suffix) -> None:
    if mine == want:
        return
    first = next((n for n, (a, b) in enumerate(zip(mine, want)) if a != b), min(len(mine), len(want)))
    shown = lambda items: (f"grid point {items[first][0]}, block {items[first][1]}"
                           if first < len(items) else "nothing")
    raise WrongResult(
        f"{fn.display}: {what} has {len(mine)} transfers, the pipeline runs {len(want)}; the first "
        f"difference is transfer {first}: got {shown(mine)}, expected {shown(want)}. A block moves "
        f"only when its index changes between consecutive grid steps (last grid axis fastest); an "
        f"output is written back when the next step's index differs, and at the end.{suffix}")
