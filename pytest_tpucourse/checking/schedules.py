"""Chapter 6's schedule check: a learner's account of a pipeline (its copies, write-backs, HBM
bytes and revisited blocks) against the pipeline a pallas_call of the same BlockSpecs runs.

The truth is read by `readers.block_skipping.pipeline_schedule`, in the order the interpreter
visits the grid; the check runs the interpreter, so it sits above the readers.
"""

from __future__ import annotations

import numpy as np

from ..core.outcomes import WrongResult
from ..readers.block_skipping import pipeline_schedule
from ..readers.reproduction import of_program_check


def assert_schedule_matches(fn, grid, in_specs, out_specs, in_shapes, out_shapes, *,
                            hbm_bytes: int | None = None, record: bool = True,
                            note: str = "") -> None:
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

    from . import tpu_rules
    from ..checks import graded

    suffix = of_program_check(fn, (grid, in_specs, out_specs, in_shapes, out_shapes), {}, note)

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
        recorded = tpu_rules.recorded_grid_points(graded(kernel, "the pipeline"), *arrays)
        truth = pipeline_schedule(closed, order=[point for point, _ in recorded])
    if hbm_bytes is not None and hbm_bytes != sum(s.nbytes for s in truth):
        from ..core.outcomes import CheckerError

        raise CheckerError(f"the test's closed form gives {hbm_bytes:,} HBM bytes, the pipeline "
                           f"moves {sum(s.nbytes for s in truth):,}")
    inputs = [s for s in truth if s.kind == "input"]
    outputs = [s for s in truth if s.kind == "output"]

    got = fn(tuple(grid), list(in_specs), list(out_specs), list(in_shapes), list(out_shapes))
    fields = ("copies", "write_backs", "hbm_bytes", "revisited")
    if not all(hasattr(got, f) for f in fields):
        raise WrongResult(f"{fn.display} returned {type(got).__name__}; expected a Schedule with "
                          f"fields {', '.join(fields)}.{suffix}")
    for name, kind, expected in (("copies", "input", inputs), ("write_backs", "output", outputs)):
        listed = _as_transfers(fn, name, getattr(got, name), len(expected), suffix)
        for n, (mine, want) in enumerate(zip(listed, expected)):
            _compare_transfers(fn, f"{name}[{n}] ({kind} {n})", mine, list(want.transfers), suffix)
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

    def shown(items):
        return f"grid point {items[first][0]}, block {items[first][1]}" if first < len(items) else "nothing"

    raise WrongResult(
        f"{fn.display}: {what} has {len(mine)} transfers, the pipeline runs {len(want)}; the first "
        f"difference is transfer {first}: got {shown(mine)}, expected {shown(want)}. A block moves "
        f"only when its index changes between consecutive grid steps (last grid axis fastest); an "
        f"output is written back when the next step's index differs, and at the end.{suffix}")
