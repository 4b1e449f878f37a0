"""Short messages: a learner's exception (their deepest frame and the error's own words),
a hang, and the report of a test that ended in a GradingOutcome."""

from __future__ import annotations


import re
import traceback
from pathlib import Path

from ..core import jax_internals
from ..core.outcomes import GradingOutcome, Todo, headline_of, without_jax_advice
from ..core.paths import shown
from . import deadline

MAX_MESSAGE_LINES = 6


def deadline_message(display: str, error: deadline.DeadlineExceeded) -> str:
    if error.deadlock:
        lines = [f"{display} deadlocked: every simulated device waits on a semaphore that no device "
                 f"will signal any more (TPU interpret mode; stopped without waiting out its "
                 f"{error.seconds:g} s deadline)."]
    else:
        lines = [
            f"{display} did not finish within {error.seconds:g} s ({error.set_by}; compiling is not "
            f"counted): a wait that nothing signals (a DMA or semaphore wait without its start or "
            f"signal), a loop (pl.loop, lax.while_loop) that never ends, or a computation that runs "
            f"longer than {error.seconds:g} s.",
        ]
    # A repeated report's call was not run: the waits it carries are the first call's, of another case.
    waits = [] if error.repeated else jax_internals.summary_lines(error.waits)
    if waits:
        lines.append("  What the simulated devices were doing:")
        lines.extend(f"    {line}" for line in waits)
    if error.repeated:
        where = f" (in {error.first_test})" if error.first_test else ""
        lines.append(f"  It passed its deadline earlier in this run{where}: not run again, so each of its "
                     f"tests fails at once until the hang is fixed.")
    elif error.still_running:
        lines.append("  It is a compiled loop that cannot be interrupted: it keeps one CPU core busy until "
                     "this run ends, which it does by itself after its last test, once the summary and "
                     "your progress are written. The other tests still run; this function's fail at once.")
    elif error.deadlock:
        lines.append("  It was stopped; the other tests still run.")
    else:
        lines.append("  It was stopped; the other tests still run, and this function's other tests "
                     "fail at once with this report.")
    return "\n".join(lines)


def raised_in(error: BaseException, path: Path) -> bool:
    """Whether the innermost frame of the error's traceback is in `path`."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve() == path.resolve()


def describe_exception(error: BaseException, learner_path: Path | None,
                       course_root: Path | None) -> str:
    """A few lines: the learner's deepest frame and the error's own message.

    Errors raised inside a kernel under TPU interpret mode reach us wrapped in a
    runtime error whose text holds a callback traceback; only its final
    `SomeError: message` line is the learner's business.
    """
    message = _root_message(error)
    lines = []
    learner_frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if learner_path is not None and Path(f.filename).resolve() == learner_path.resolve()
    ]
    if learner_frames:
        frame = learner_frames[-1]
        lines.append(f"  {shown(Path(frame.filename), course_root)}:{frame.lineno} in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    text = message.splitlines() or [""]
    if len(text) > MAX_MESSAGE_LINES:
        text = text[:MAX_MESSAGE_LINES] + ["  ..."]
    lines.extend("  " + line for line in text)
    return "\n".join(lines)


def exception_headline(display: str, error: BaseException, learner_path: Path | None,
                       course_root: Path | None) -> str:
    """One line for a learner's exception: `add() in ... raised ValueError: ... (file.py:12)`."""
    message = headline_of(_root_message(error))
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if learner_path is not None and Path(f.filename).resolve() == learner_path.resolve()]
    where = f" ({shown(Path(frames[-1].filename), course_root)}:{frames[-1].lineno})" if frames else ""
    return f"{display} raised {message}{where}"


def _root_message(error: BaseException) -> str:
    """The error's own words, without JAX's advice to file a bug (never the learner's business)."""
    text = without_jax_advice(str(error))
    if type(error).__name__ == "JaxRuntimeError" or "Traceback (most recent call last)" in text:
        for line in reversed(text.splitlines()):
            head = line.split(":", 1)[0].strip()
            if head.endswith(("Error", "Exception")) and " " not in head:
                return line.strip()
    return f"{type(error).__name__}: {text}"


def outcome_report(error: BaseException) -> tuple[str, bool, str] | None:
    """(the report's text, whether it is a TODO, its headline) of a test that raised a
    GradingOutcome, or None. The outcome's message is the whole report, with no traceback into
    the plugin; hypothesis' own notes are left out where the message carries the reproduction
    (the drawn example is in it), and its advice to decorate the test (@reproduce_failure,
    @seed) always is: graded tests are not the learner's to edit."""
    outcome = _grading_outcome(error)
    if outcome is None:
        return None
    text = outcome.render()
    notes = ([] if REPRODUCTION_MARK in text or not outcome.inputs_matter
             else _useful_notes(getattr(error, "__notes__", [])))
    return "\n".join([text, *notes]), isinstance(outcome, Todo), outcome.headline


def assertion_report(error: BaseException, test_path: Path,
                     course_root: Path | None) -> tuple[str, bool, str] | None:
    """(the report's text, False, its headline) of a graded test file's own `assert` that failed,
    in the course's words: the assertion's message, or where it has none the assertion with its
    line; then the case hypothesis drew. No traceback into the test and no pytest introspection
    under it (the message says what was expected). None for any other failure: an assertion
    raised elsewhere (the learner's code, a helper) keeps pytest's report."""
    if not isinstance(error, AssertionError) or isinstance(error, GradingOutcome):
        return None
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or Path(tb.tb_frame.f_code.co_filename).resolve() != Path(test_path).resolve():
        return None
    text = str(error).strip()
    if not text or text.startswith("assert "):
        checked = text.splitlines()[0] if text else "assert"
        message = f"the check at {shown(Path(test_path), course_root)}:{tb.tb_lineno} failed: {checked}"
    else:
        message = text.split("\nassert ", 1)[0].rstrip()
    return "\n".join([message, *_useful_notes(getattr(error, "__notes__", []))]), False, headline_of(message)


REPRODUCTION_MARK = "\n  reproduce ("  # where reproduction.py's lines start in a message


def without_reproduction(text: str) -> str:
    """A report without its reproduction lines: what two tests failing the same way share."""
    return text.split(REPRODUCTION_MARK, 1)[0].split("\n  its inputs (", 1)[0]


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def same_failure(text: str) -> str:
    """What two reports of one failure share: the report without its reproduction, every number
    left out (the shape, the count of NaN, the worst element differ from case to case; the
    failure does not)."""
    return _NUMBER.sub("#", without_reproduction(text))


def _grading_outcome(error: BaseException) -> GradingOutcome | None:
    """The GradingOutcome behind an exception (hypothesis may group several)."""
    if isinstance(error, GradingOutcome):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _grading_outcome(inner)
            if found is not None:
                return found
    return None


_HYPOTHESIS_ADVICE = ("@reproduce_failure", "reproduce_failure(", "@seed(", "--hypothesis-seed",
                      "You can add @seed", "You can reproduce this example")


_DRAWN = re.compile(r"^(?:Failing explicit example|Falsifying(?: explicit)? example):\s*\w+\((?P<args>.*)\)\s*$", re.S)


# pytest's `request` fixture in hypothesis' example (`request=<FixtureRequest ...>,`): never a drawn value.
_FIXTURE_ARGUMENT = re.compile(r"^\s*\w+=<FixtureRequest\b[^\n]*>,?\s*$")


def _useful_notes(notes: list[str]) -> list[str]:
    """Hypothesis' failing example as one line in the course's words (`  the failing case: ...`),
    without fixture noise or advice to edit the test."""
    kept = []
    for note in notes:
        lines = [line for line in str(note).splitlines()
                 if "impl=" not in line and "mesh=factory" not in line
                 and not _FIXTURE_ARGUMENT.match(line)
                 and not any(advice in line for advice in _HYPOTHESIS_ADVICE)]
        text = "\n".join(lines).strip()
        drawn = _DRAWN.match(text)
        if drawn is not None:
            args = " ".join(part.strip() for part in drawn["args"].splitlines()).strip().rstrip(",")
            if args:
                kept.append(f"  the failing case: {args}")
        elif text:
            kept.append(text)
    return kept


# ---------------------------------------------------------------- the TPU lowering's refusals

_BLOCK_REFUSED = re.compile(r"Block spec for (?P<origin>\S+) in pallas_call (?P<kernel>\S+) at (?P<at>\S+?)[ ,]")
_UNLOWERED = re.compile(r"Unimplemented primitive in Pallas TPU lowering(?: for \w+)?: (?P<primitive>\w+)")


def lowering_explanation(error: BaseException, program, course_root: Path | None) -> list[str] | None:
    """The TPU lowering's refusal of a program in the course's words, or None where it is none
    of the common ones: a block shape (naming the BlockSpec's line, the array and the rule), a
    matmul accumulating in fewer than 32 bits, an operation Mosaic has no lowering for.

    program: the closed jaxpr the lowering was given (to find the refused block's BlockSpec).
    """
    from ..readers import blockspecs, traced_program
    from ..core import jax_internals

    text = str(error)
    refused = _BLOCK_REFUSED.search(text)
    if refused is not None and program is not None:
        for eqn in traced_program.pallas_call_eqns(program):
            grid = jax_internals.kernel_grid(eqn)
            for operand in (*grid.inputs, *grid.outputs):
                if operand.origin != refused["origin"]:
                    continue
                if not jax_internals.kernel_source(eqn).endswith(refused["at"]):
                    continue
                sizes = tuple(jax_internals.block_dim(d)[0] for d in operand.block_shape)
                block = tuple(None if d is None or type(d).__name__ == "Squeezed" else size
                              for d, size in zip(operand.block_shape, sizes))
                dtype = _dtype_name(operand.dtype)
                why = blockspecs.explain(operand.array_shape, block, dtype, text)
                at = _where(operand.index_map_at, course_root)
                return [f"The BlockSpec {at}cuts {operand.name} of kernel {refused['kernel']} (a "
                        f"{tuple(operand.array_shape)} {dtype} array) into blocks of {sizes}: {why}.",
                        "A TPU block's last two dimensions must be multiples of (8, 128), or the array's "
                        "own dimensions."]
    if "Expected matmul acc to be 32-bit" in text:
        return ["The Mosaic matmul of this toolchain accepts only a 32-bit accumulator (its verifier's "
                "internal error, not a documented hardware rule): ask for it with "
                "jnp.dot(a, b, preferred_element_type=jnp.float32) (or int32), keep the running sum in a "
                "float32 scratch, and cast only the result."]
    unlowered = _UNLOWERED.search(text)
    if unlowered is not None:
        return [f"`{unlowered['primitive']}` has no Mosaic (TPU) lowering: a kernel cannot use it. Write it "
                f"from operations that lower (elementwise math, reductions, jnp.dot, loops over blocks)."]
    return None


def _dtype_name(dtype) -> str:
    import numpy as np

    return np.dtype(dtype).name


def lowering_text(error: BaseException, max_lines: int = MAX_MESSAGE_LINES) -> list[str]:
    """The lowering's own words, without JAX's advice to file a bug."""
    lines = without_jax_advice(str(error)).splitlines()
    lines = lines[:max_lines] + (["..."] if len(lines) > max_lines else [])
    return [f"{type(error).__name__}: {line}" if i == 0 else line for i, line in enumerate(lines)]


def _where(source: str, course_root: Path | None) -> str:
    """'<lambda> at /course/exercises/ch11/matmul.py:41' -> 'at exercises/ch11/matmul.py:41 '."""
    _, _, location = source.rpartition(" at ")
    if not location:
        return ""
    path, _, line = location.rpartition(":")
    return f"at {shown(Path(path), course_root)}:{line} " if path else f"at {location} "


def parallel_axes_outputs_ignore(program, course_root: Path | None = None) -> list[str]:
    """A line for each grid axis marked "parallel" that an output's index map ignores (every
    output that ignores it named in that one line): the steps along it write one output block,
    and two cores that split them both write that block."""
    from ..readers import traced_program

    lines = []
    unread = traced_program.unread_outputs(program) if program is not None else {}
    for eqn in traced_program.pallas_call_eqns(program) if program is not None else ():
        semantics = jax_internals.dimension_semantics(eqn)
        grid = jax_internals.kernel_grid(eqn)
        if not semantics or len(semantics) != len(grid.grid):
            continue
        for axis, kind in enumerate(semantics):
            if kind != "parallel" or grid.grid[axis] <= 1:
                continue
            ignoring = [operand for operand in grid.outputs
                        if axis not in jax_internals.grid_axes_read(operand.index_map, len(grid.grid))]
            if not ignoring:
                continue
            places = [_where(o.index_map_at, course_root).strip().removeprefix("at ") for o in ignoring]
            places = [p for p in dict.fromkeys(places) if p]
            outputs = (f"output {ignoring[0].position}" if len(ignoring) == 1 else
                       "outputs " + ", ".join(str(o.position) for o in ignoring[:-1]) + f" and {ignoring[-1].position}")
            maps = "index map" if len(ignoring) == 1 else "index maps"
            if all(o.position in unread.get(id(eqn), ()) for o in ignoring):
                # Nothing reads them: state the kernel keeps in an output, written back by each core.
                fix = (f"The program never reads {outputs} after the call: {'it is' if len(ignoring) == 1 else 'they are'} "
                       f"the kernel's working state, not results. Keep that state in scratch_shapes (each core "
                       f"has its own), and axis {axis} can stay \"parallel\".")
            else:
                fix = ("An axis an output's index map ignores is a reduction (or carries state): mark it "
                       "\"arbitrary\".")
            lines.append(
                f"Grid axis {axis} is marked \"parallel\" (dimension_semantics={semantics}), and the {maps} of "
                f"{outputs}{' (at ' + ', '.join(places) + ')' if places else ''} ignore{'s' if len(ignoring) == 1 else ''} "
                f"it: its {grid.grid[axis]} steps write one output block, so two cores that split them both "
                f"write it. {fix}")
    return lines


_OUT_OF_BOUNDS = re.compile(r'Out-of-bounds block index \((?P<index>[^)]*)\) for (?P<kind>input|output) "(?P<ref>\w+)"'
                            r'.*?has shape \((?P<padded>[^)]*)\)')


def out_of_bounds_detail(text: str, program, course_root: Path | None = None) -> str | None:
    """TPU interpret mode names the padded array in an out-of-bounds error ((16, 384) for a
    (13, 342) array in (8, 128) blocks): the line that gives the array as passed, and its blocks."""
    from ..core import jax_internals
    from ..readers import traced_program

    found = _OUT_OF_BOUNDS.search(text)
    if found is None or program is None:
        return None
    for eqn in traced_program.pallas_call_eqns(program):
        names = list(getattr(jax_internals.kernel_jaxpr(eqn).debug_info, "arg_names", None) or ())
        if found["ref"] not in names:
            continue
        grid = jax_internals.kernel_grid(eqn)
        position = names.index(found["ref"])
        operands = (*grid.inputs, *grid.outputs)
        if position >= len(operands):
            return None
        operand = operands[position]
        block = tuple(jax_internals.block_dim(d)[0] for d in operand.block_shape)
        return (f"  {found['ref']} is your {tuple(operand.array_shape)} array; the interpreter pads it to whole "
                f"{block} blocks, ({found['padded']}), and block index ({found['index']}) lies past even that: "
                f"check the index map of its BlockSpec{' ' + _where(operand.index_map_at, course_root).strip() if operand.index_map_at else ''}.")
    return None
