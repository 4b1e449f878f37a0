"""What a wrong result's evidence shows, from the failing call made again.

A value check that fails knows the symptom (NaN, Inf, finite values off by more than the
bound); `explain` finds its cause by running the call again, cheapest evidence first, and
says first what the evidence shows:

1. A grid axis marked "parallel" that an output's index map ignores, and the call run with
   its parallel steps in another order (`random_seed`): a result that changes proves the
   steps depend on each other (the axis carries state and must be "arbitrary").
2. The call run with never-written memory filled with 0 instead of NaN
   (`InterpretParams(uninitialized_memory="zero")`): a result that changes proves a read of
   memory nothing wrote; one that does not rules it out. Then which: the output blocks no
   grid step writes (each output's index map over the grid, a count per block), else the
   failing block computed again step by step with every buffer labelled until written
   (kernel_steps.unwritten_reads), else, for kernels that copy, the call with every copy
   done the moment it starts (`dma_execution_mode="eager"`).
3. For a NaN or Inf the arithmetic made: the program evaluated equation by equation, then
   the kernel that made it step by step (kernel_steps.first_made): the first equation that
   made an Inf or a NaN out of operands that held none, and what made it (an overflow, 0/0,
   inf - inf, a division by zero).
4. For finite values off in a low-precision dtype: the call on float32 copies of the same
   inputs; within float32's bound, the error is rounding in the narrow dtype.

Each finding names its cause from causes.CAUSES. It runs only after a check has failed,
once per reported failure; anything that cannot be followed is left out, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import jax_internals, tolerance
from ..core.paths import shown
from ..readers import traced_program
from . import causes, kernel_steps
from .replay import Replay, ReplayFailed
from .stepping import NONE, Walk, non_finite


@dataclass(frozen=True)
class Finding:
    cause: str  # a name in causes.CAUSES
    lines: tuple[str, ...]  # the evidence, in the course's words, first what it shows


def explain(replay: Replay, got: np.ndarray, expected: np.ndarray, *, what: str, dtype,
            kind: str = "forward") -> Finding | None:
    """The cause of `got` (the judged leaf) being wrong, from the call made again; None where
    the evidence shows nothing more than the check said. expected: the float64 oracle's."""
    got = np.asarray(got, dtype=np.float64)
    bad = ~np.isfinite(got) & ~(np.isnan(got) & np.isnan(expected)) & ~(got == expected)
    try:
        program, flat = replay.program()
    except Exception:
        program, flat = None, None
    course_root = getattr(getattr(replay.fn, "module", None), "course_root", None)
    case = _Case(replay, got, bad, what, program, flat, course_root)
    if bad.any():
        return case.order() or case.unwritten() or case.arithmetic()
    return case.order() or case.precision(expected, dtype, kind)


class _Case:
    def __init__(self, replay, got, bad, what, program, flat, course_root):
        self.replay, self.got, self.bad, self.what = replay, got, bad, what
        self.program, self.flat, self.course_root = program, flat, course_root
        self.kernels = traced_program.pallas_call_eqns(program) if program is not None else []
        self.first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None
        self.ruled_out: list[str] = []

    def where(self, location: str) -> str:
        path, _, line = location.rpartition(":")
        return f"{shown(path, self.course_root)}:{line}" if path else location

    def zeroed(self) -> np.ndarray:
        """The call made again with never-written memory filled with 0 (made once)."""
        if getattr(self, "_zeroed", None) is None:
            self._zeroed = self.replay.run(uninitialized_memory="zero")
        return self._zeroed

    def differs(self, other: np.ndarray) -> np.ndarray:
        same = (other == self.got) | (np.isnan(other) & np.isnan(self.got))
        return ~same

    # ------------------------------------------------------------ 1. the order of parallel steps

    def order(self) -> Finding | None:
        axes = [(eqn, axis, semantics) for eqn in self.kernels
                for axis, semantics in _parallel_axes_outputs_ignore(eqn)]
        if not axes or not self.replay.tpu_interpret:
            return None
        seed = (getattr(self.replay.interpret, "random_seed", None) or 0) + 1
        try:
            other = self.replay.run(random_seed=seed)
            changed, how = self.differs(other), ""
            if not changed.any():  # NaN in every order hides the order: compare with memory zeroed
                first, other = self.zeroed(), self.replay.run(random_seed=seed, uninitialized_memory="zero")
                changed = ~((first == other) | (np.isnan(first) & np.isnan(other)))
                how = ", never-written memory filled with 0 in both"
        except ReplayFailed:
            return None
        if not changed.any():
            return None
        eqn, axis, semantics = axes[0]
        grid = jax_internals.kernel_grid(eqn).grid
        return Finding("parallel axis carries state", (
            f"Its parallel grid steps depend on their order: run again with them in another order "
            f"(TPU interpret mode, random_seed {seed}{how}), {self.what} changes in {int(changed.sum()):,} of "
            f"{changed.size:,} values.",
            f"Grid axis {axis} of kernel {_kernel(eqn)} is marked \"parallel\" (dimension_semantics="
            f"{semantics}), and an output's index map ignores it: its {grid[axis]} steps all write one "
            f"output block, a reduction (or a state carried from step to step), which must be \"arbitrary\"."))

    # ------------------------------------------------------------ 2. memory never written

    def unwritten(self) -> Finding | None:
        if not self.kernels or not self.replay.tpu_interpret:
            return None
        try:
            zeroed = self.zeroed()
        except ReplayFailed:
            return None
        changed = self.differs(zeroed)
        if not changed.any():
            self.ruled_out.append(
                f"Never-written memory is ruled out: run again with it filled with 0 instead of NaN, "
                f"{self.what} is the same.")
            return None
        nan_before, nan_after = int(np.isnan(self.got).sum()), int(np.isnan(zeroed).sum())
        proof = (f"Run again with never-written memory filled with 0 instead of NaN (TPU interpret mode, "
                 f"uninitialized_memory=\"zero\"), {self.what} changes in {int(changed.sum()):,} of "
                 f"{changed.size:,} values ({nan_before:,} NaN before, {nan_after:,} after).")
        return self.blocks_never_written(proof) or self.read_before_written(proof)

    def blocks_never_written(self, proof: str) -> Finding | None:
        for eqn in self.kernels:
            grid = jax_internals.kernel_grid(eqn)
            if not grid.static:
                continue
            try:
                counts = kernel_steps.writes_per_block(eqn, kernel_steps.Operands((), ()))
            except Exception:
                continue
            for position, (block, written) in enumerate(zip(grid.outputs, counts)):
                never = [index for index, n in written.items() if n == 0]
                if not never or tuple(block.array_shape) != self.got.shape:
                    continue
                sizes = tuple(jax_internals.block_dim(d)[0] for d in block.block_shape)
                if self.first is not None and tuple(e // s for e, s in zip(self.first, sizes)) not in never:
                    continue
                count = f"All {len(never)}" if len(never) == len(written) else f"{len(never)} of the {len(written)}"
                are = "is" if len(never) == 1 and len(written) > 1 else "are"
                return Finding("output block never written", (
                    f"{count} blocks of output {position} of kernel {_kernel(eqn)} {are} never written: "
                    f"{_blocks(never, sizes, block.array_shape)}. {proof}",
                    *_cover(grid, block, written, sizes, self.where)))
        return None

    def read_before_written(self, proof: str) -> Finding:
        lines = [f"Memory never written is read: {proof[0].lower()}{proof[1:]} Every output block is "
                 f"written."]
        found = self._kernel_that_made("NaN")
        if found is not None:
            eqn, operands, output, element = found
            run = _quietly(lambda: kernel_steps.unwritten_reads(eqn, operands, output, element))
            if run is not None and run.labels:
                read = "; ".join(sorted(run.labels))
                lines.append(f"Computed again step by step (kernel {_kernel(eqn)}), the NaN in "
                             f"{self.what} comes from {read}.{_remedy(run.labels)}")
                return Finding("never-written memory read", tuple(lines))
        if any(_copies(eqn) for eqn in self.kernels):
            try:
                eager = self.replay.run(dma_execution_mode="eager")
            except ReplayFailed:
                eager = None
            left = (jax_internals.left_semaphores_text(jax_internals.semaphores_left_nonzero(self.replay.printed))
                    if eager is not None else "")
            if left:
                cured = f"{self.what} has no NaN, and " if np.isfinite(eager[self.bad]).all() else ""
                return Finding("copy never waited", (
                    f"A copy is started and never waited for: with every copy done the moment it starts "
                    f"(dma_execution_mode=\"eager\"), {cured}the kernel ends with {left}. A copy nothing "
                    f"waits for may not have landed when its destination is read (under \"on_wait\" it never "
                    f"runs at all): every .start() needs its .wait() before its buffer is read.", proof))
            if eager is not None and np.isfinite(eager[self.bad]).all():
                lines.append(f"With every copy done the moment it starts (dma_execution_mode=\"eager\"), "
                             f"{self.what} has no NaN: a copy's destination is read before its data "
                             f"lands. Read a buffer only after its copy's .wait().")
        return Finding("never-written memory read", tuple(lines))

    # ------------------------------------------------------------ 3. arithmetic

    def arithmetic(self) -> Finding | None:
        if self.program is None:
            return None
        kind = "NaN" if np.isnan(self.got[self.first]) else "Inf"
        walk = Walk(on_kernel=self._step_into)
        self._walk = walk
        try:
            self.replay.fn.context.deadline.call(lambda: walk.run(self.program, self.flat))
        except Exception:
            return None
        made = walk.made.get(kind)
        if made is None or made.primitive in _OPAQUE:
            return None
        cause, line = _arithmetic_words(made, walk.made.get("Inf"), self.where)
        return Finding(cause, (line, *self.ruled_out))

    def _step_into(self, eqn, values):
        """A pallas_call met while the program is evaluated: bound as is; where it makes the first
        NaN or Inf, its failing block is computed again step by step to find the equation."""
        walk = self._walk
        outs = Walk._bind(eqn, values)
        held = [non_finite(v) for v in values]
        made = [non_finite(o) for o in outs]
        for kind, index in (("NaN", 0), ("Inf", 1)):
            before = any(h[0] for h in held) or (kind == "Inf" and any(h[1] for h in held))
            if kind in walk.made or before or not any(m[index] for m in made):
                continue
            output = next(k for k, m in enumerate(made) if m[index])
            array = np.asarray(outs[output]).astype(np.float64)
            element = tuple(int(i) for i in np.argwhere(np.isnan(array) if kind == "NaN" else np.isinf(array))[0])
            run = _quietly(lambda: kernel_steps.first_made(eqn, kernel_steps.operands_of(eqn, values),
                                                           output, element))
            if run is not None:
                for found_kind, found in run.made.items():
                    walk.made.setdefault(found_kind, found)
        return outs

    def _kernel_that_made(self, kind):
        """(eqn, operands, output, element) of the first kernel whose output holds a NaN its
        operands did not, the program evaluated under the failed check's interpret mode."""
        if self.program is None:
            return None
        found = []

        def seen(eqn, values):
            outs = Walk._bind(eqn, values)
            if not found and not any(non_finite(v)[0] for v in values):
                for output, out in enumerate(outs):
                    array = np.asarray(out)
                    if np.issubdtype(array.dtype, np.inexact) or str(array.dtype) == "bfloat16":
                        nan = np.isnan(array.astype(np.float64))
                        if nan.any():
                            element = tuple(int(i) for i in np.argwhere(nan)[0])
                            found.append((eqn, kernel_steps.operands_of(eqn, values), output, element))
                            break
            return outs

        try:
            self.replay.fn.context.deadline.call(lambda: Walk(on_kernel=seen).run(self.program, self.flat))
        except Exception:
            return None
        return found[0] if found else None

    # ------------------------------------------------------------ 4. precision

    def precision(self, expected, dtype, kind) -> Finding | None:
        narrow = np.dtype(dtype).name
        if narrow not in ("bfloat16", "float16"):
            return None
        args, cotangents = self.replay.with_float32_inputs()
        try:
            wide = self.replay.run_on(args, cotangents)
        except ReplayFailed:
            return None
        if not np.isfinite(wide).all():
            return None
        error, bound, _ = tolerance.judge(wide, expected, np.dtype("float32"), kind, None)
        if not error <= bound:
            return None
        return Finding("precision", (
            f"Rounding in {narrow}: run again on float32 copies of the same inputs, {self.what} is right "
            f"(relative error {error:.1e}, within float32's bound {bound:.0e}). Something is kept in "
            f"{narrow} between steps: an accumulator, a running sum, or a product without "
            f"preferred_element_type=jnp.float32.",))


# ---------------------------------------------------------------- words


def _kernel(eqn) -> str:
    return jax_internals.kernel_name(eqn) or "its kernel"


def _parallel_axes_outputs_ignore(eqn):
    """(axis, semantics) of each grid axis marked "parallel", of more than one step, that an
    output's index map does not read."""
    semantics = jax_internals.dimension_semantics(eqn)
    grid = jax_internals.kernel_grid(eqn)
    if not semantics or len(semantics) != len(grid.grid):
        return []
    found = []
    for axis, kind in enumerate(semantics):
        if kind == "parallel" and grid.grid[axis] > 1 and any(
                axis not in jax_internals.grid_axes_read(o.index_map, len(grid.grid)) for o in grid.outputs):
            found.append((axis, semantics))
    return found


def _copies(eqn) -> bool:
    body = jax_internals.kernel_jaxpr(eqn)
    return any(e.primitive.name == "dma_start" for e in traced_program._all_eqns(body))


def _blocks(never, sizes, shape) -> str:
    def span(index):
        parts = []
        for i, size, dim in zip(index, sizes, shape):
            start = i * size
            parts.append(f"{start}..{min(start + size, dim) - 1}" if size > 1 else f"{start}")
        return f"block {index} ({', '.join(parts)})"
    shown_blocks = [span(index) for index in sorted(never)[:3]]
    more = f" and {len(never) - 3} more" if len(never) > 3 else ""
    return ", ".join(shown_blocks) + more


def _cover(grid, block, written, sizes, where) -> list[str]:
    """What leaves the blocks unwritten: a grid too small for the array along an axis, or an
    index map that writes some blocks more than once and others never."""
    twice = sorted(index for index, n in written.items() if n > 1)
    empty = [axis for axis, extent in enumerate(grid.grid) if extent == 0]
    if empty:
        return [f"The grid {grid.grid} runs no step at all: it has 0 steps along axis "
                f"{' and '.join(map(str, empty))} (a grid taken from the blocks before they are clamped to "
                f"the array, say)."]
    lines = []
    for axis, (dim, size) in enumerate(zip(block.array_shape, sizes)):
        needed = -(-dim // size)
        reached = max((index[axis] for index, n in written.items() if n), default=-1) + 1
        if reached < needed:
            lines.append(f"The grid {grid.grid} reaches {reached} of the {needed} blocks along the output's "
                         f"axis {axis} ({dim} in blocks of {size}): a grid must cover every block, "
                         f"pl.cdiv({dim}, {size}) = {needed}.")
    if twice and not lines:
        at = where(block.index_map_at.rpartition(" at ")[2]) if block.index_map_at else ""
        lines.append(f"The output's index map{' at ' + at if at else ''} sends several grid steps to the "
                     f"same block ({len(twice)} blocks written more than once, the first {twice[0]}) and "
                     f"none to the others.")
    return lines


def _remedy(labels) -> str:
    if any("padding" in label for label in labels):
        return " Mask the rows or columns past the array's edge before they are used."
    if any("scratch" in label or "block) before" in label for label in labels):
        return (" Write it before its first read: set it under pl.when at the first step of the grid axis "
                "it carries over.")
    return ""


# Equations evaluated whole, whose first NaN says nothing of the arithmetic inside (the devices
# of a shard_map, a kernel that could not be stepped).
_OPAQUE = frozenset({"shard_map", "pallas_call", "xla_pmap", "custom_vjp_call", "while", "scan"})

_OVERFLOW_LIMIT = {"float32": 88.72, "bfloat16": 88.72, "float16": 11.09, "float64": 709.78}


def _arithmetic_words(made, inf, where) -> tuple[str, str]:
    """(cause, the line saying it) for the first NaN or Inf the arithmetic made."""
    at = _step(made)
    values = made.operands
    name = made.primitive
    if made.kind == "NaN" and name == "div" and len(values) == 2 and values[0] == 0 and values[1] == 0:
        return "0/0", (f"The first NaN is 0/0: a division ({name}) of 0 by 0{at}. The denominator is 0 "
                       f"there; find why (a sum that stayed 0, every term of it rounded to 0).")
    if made.kind == "NaN" and any(np.isinf(v) for v in values if isinstance(v, float)):
        combined = {"sub": "inf - inf", "add": "inf + (-inf)", "div": "inf / inf", "mul": "0 * inf",
                    "dot_general": "0 * inf in a product"}.get(name, f"{name} of an infinity")
        if inf is not None and inf.kind == "Inf":
            cause, origin = _arithmetic_words(inf, None, where)
            return cause, f"{origin} Then {combined} makes the NaN ({name}{_step(made)})."
        return "inf - inf", (f"The first NaN is {combined} ({name}{at}): infinities that cancel. The "
                             f"infinities were there before the arithmetic: in the inputs, or a -inf "
                             f"that a mask put in.")
    if made.kind == "Inf" and name in ("exp", "exp2", "pow", "expm1"):
        limit = _OVERFLOW_LIMIT.get(made.dtype, 88.72)
        x = f" of {values[0]:.4g}" if values and isinstance(values[0], float) else ""
        return "overflow", (f"The first Inf is an overflow: {name}{x} at {where(made.where)}{at} (in "
                            f"{made.dtype}, exp of anything above {limit:g} is inf). Shift the argument "
                            f"down first (subtract the row's max).")
    if made.kind == "Inf" and name == "div":
        return "division by zero", f"The first Inf is a division by zero ({name}{at}): x / 0."
    if made.kind == "Inf" and name == "log":
        return "division by zero", f"The first Inf is log(0) = -inf ({name}{at}): its argument is 0."
    if made.kind == "Inf":
        return "overflow", (f"The first Inf is an overflow: {name} at {where(made.where)}{at} makes a value "
                            f"past {made.dtype}'s largest.")
    return "non-finite arithmetic", f"The first NaN is made by {name}{at}."


def _step(made) -> str:
    if made.point is None:
        return ""
    return f", kernel {made.kernel or 'its kernel'} at grid step {made.point}"


def _quietly(thunk):
    try:
        return thunk()
    except Exception:
        return None


__all__ = ["Finding", "causes", "explain"]
