"""One output block of a kernel, computed again one grid step at a time.

Which grid steps write a block is the output's index map's to say; those steps are run in
the grid's order, as the generic interpreter runs them (every copy done at once, no
shuffled parallel axes), each step's body evaluated equation by equation (stepping.Walk).
Two ways:

- `first_made`: inputs padded with zeros, every buffer zeroed first: the first NaN or Inf
  the kernel's own arithmetic makes, and where (exp overflowing, 0/0, inf - inf).
- `unwritten_reads`: every buffer the kernel has not written yet holds a NaN with a label
  (a scratch buffer, the output block, the padding of a ragged input block): the labels the
  failing element carries at the end name the never-written memory it was computed from.

Also here: how many times each output block is written (`writes_per_block`), from the
index maps over the whole grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import jax_internals
from ..readers import block_skipping
from .stepping import Made, Walk

MOST_STEPS = 512  # a block written by more steps is followed through its first ones


@dataclass(frozen=True)
class Operands:
    """A pallas_call equation's concrete operands, split as its kernel takes them."""

    prefetch: tuple
    inputs: tuple


def operands_of(eqn, values) -> Operands:
    grid = jax_internals.kernel_grid(eqn)
    first = len(values) - len(grid.inputs) - len(grid.prefetch_vars)
    return Operands(tuple(values[first:first + len(grid.prefetch_vars)]),
                    tuple(values[first + len(grid.prefetch_vars):]))


def writes_per_block(eqn, operands: Operands) -> list[dict[tuple, int]]:
    """For each output: {block index: how many grid steps write it back}, every block of the
    (padded) array listed, 0 for those no step writes. A step writes an output block back when
    the next step's index differs, and at the grid's last step (the TPU's pipeline)."""
    grid = jax_internals.kernel_grid(eqn)
    counts = []
    for block in grid.outputs:
        sizes = [jax_internals.block_dim(d) for d in block.block_shape]
        if any(per_element for _, per_element in sizes):
            counts.append({})
            continue
        per_axis = [-(-dim // size) for dim, (size, _) in zip(block.array_shape, sizes)]
        found = {index: 0 for index in np.ndindex(*per_axis)}
        indices = [tuple(int(i) for i in row)
                   for row in block_skipping.block_indices(block, grid.grid, operands.prefetch)]
        for step, index in enumerate(indices):
            if step == len(indices) - 1 or indices[step + 1] != index:
                found[index] = found.get(index, 0) + 1
        counts.append(found)
    return counts


def block_of(eqn, output: int, element: tuple) -> tuple:
    """The block index of an output's element."""
    block = jax_internals.kernel_grid(eqn).outputs[output]
    sizes = [jax_internals.block_dim(d)[0] for d in block.block_shape]
    return tuple(int(e) // s for e, s in zip(element, sizes))


@dataclass(frozen=True)
class BlockRun:
    made: dict  # "NaN" / "Inf" -> stepping.Made
    labels: frozenset  # the labels the element's final value carries (unwritten_reads)
    element_nan: bool  # the element is NaN at the end


def first_made(eqn, operands: Operands, output: int, element: tuple) -> BlockRun | None:
    """The first NaN and Inf the kernel's arithmetic makes while computing an output's element's
    block, from zeroed buffers and zero padding; None where the kernel cannot be stepped."""
    return _run_block(eqn, operands, output, element, poison=False)


def unwritten_reads(eqn, operands: Operands, output: int, element: tuple) -> BlockRun | None:
    """The same block, every buffer NaN until written, each with a label naming it."""
    return _run_block(eqn, operands, output, element, poison=True)


def _run_block(eqn, operands: Operands, output: int, element: tuple, *, poison: bool) -> BlockRun | None:
    import jax.numpy as jnp
    from jax import lax

    program = jax_internals.kernel_step_program(eqn)
    if program is None:
        return None
    grid = jax_internals.kernel_grid(eqn)
    target = block_of(eqn, output, element)
    indices = block_skipping.block_indices(grid.outputs[output], grid.grid, operands.prefetch)
    points = [p for p, index in zip(np.ndindex(*grid.grid), indices) if tuple(int(i) for i in index) == target]
    if not points:
        return None
    names = list(program.arg_names)[program.num_prefetch:]
    operand_names = [names[k] if k < len(names) else f"operand {k}"
                     for k in range(program.num_inputs + program.num_outputs + len(program.scratch))]
    fill = np.nan if poison else 0
    arrays, labels = [], []
    for k, (value, shape) in enumerate(zip(operands.inputs, program.block_shapes)):
        arrays.append(_padded(jnp.asarray(value), shape, fill))
        labels.append(frozenset({f"the padding of {operand_names[k]} past the array's edge"}) if poison
                      and arrays[-1].shape != np.shape(value) else frozenset())
    for k, block in enumerate(grid.outputs):
        arrays.append(jnp.full([s for s in _padded_shape(block.array_shape, program.block_shapes[
            program.num_inputs + k])], fill, block.dtype))
        labels.append(frozenset({f"{operand_names[program.num_inputs + k]} (output {k}'s block) before "
                                 f"anything writes it"}) if poison else frozenset())
    scratch = [jnp.full(shape, fill, dtype) for shape, dtype in program.scratch]
    scratch_labels = [frozenset({f"{operand_names[program.num_inputs + program.num_outputs + k]} "
                                 f"(scratch) before anything writes it"}) if poison else frozenset()
                      for k in range(len(scratch))]
    walk = Walk()
    walk.kernel = jax_internals.kernel_name(eqn)
    block_labels = list(labels)
    for point in points[:MOST_STEPS]:
        starts = jax_internals.block_starts(eqn, point, operands.prefetch)
        blocks = [_squeezed(lax.dynamic_slice(a, s, shape), squeeze)
                  for a, s, shape, squeeze in zip(arrays, starts, program.block_shapes, program.squeezed)]
        walk.point = tuple(int(i) for i in point)
        with jax_internals.at_grid_point(point, program.grid):
            outs, out_labels = walk.eval(program.body, program.consts,
                                         [*operands.prefetch, *blocks, *scratch],
                                         [frozenset()] * len(operands.prefetch) + block_labels + scratch_labels)
        n = len(operands.prefetch)
        written, written_labels = outs[n:n + len(blocks)], out_labels[n:n + len(blocks)]
        for k in range(program.num_inputs, len(blocks)):  # the output blocks, back into their arrays
            arrays[k] = lax.dynamic_update_slice(arrays[k], _unsqueezed(written[k], program.squeezed[k]),
                                                 starts[k])
        block_labels = [labels[k] if k < program.num_inputs else written_labels[k] for k in range(len(blocks))]
        scratch, scratch_labels = outs[n + len(blocks):], out_labels[n + len(blocks):]
        if not poison and walk.made:
            break
    result = np.asarray(arrays[program.num_inputs + output])
    value = result[tuple(element)] if all(e < s for e, s in zip(element, result.shape)) else 0.0
    return BlockRun(dict(walk.made), block_labels[program.num_inputs + output],
                    bool(np.isnan(np.asarray(value, dtype=np.float64))))


def _padded_shape(shape, block_shape):
    return tuple(-(-dim // size) * size for dim, size in zip(shape, block_shape))


def _padded(value, block_shape, fill):
    import jax.numpy as jnp

    shape = _padded_shape(value.shape, block_shape)
    if tuple(shape) == tuple(value.shape):
        return value
    fill = fill if jnp.issubdtype(value.dtype, jnp.inexact) else 0
    return jnp.pad(value, [(0, p - s) for p, s in zip(shape, value.shape)], constant_values=fill)


def _squeezed(block, squeeze):
    axes = tuple(i for i, s in enumerate(squeeze) if s)
    return block.squeeze(axes) if axes else block


def _unsqueezed(block, squeeze):
    import jax.numpy as jnp

    for axis, s in enumerate(squeeze):
        if s:
            block = jnp.expand_dims(block, axis)
    return block


__all__ = ["BlockRun", "Made", "Operands", "block_of", "first_made", "operands_of", "unwritten_reads",
           "writes_per_block"]
