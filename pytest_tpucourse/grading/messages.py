"""Short messages: a learner's exception (their deepest frame and the error's own words),
a hang, and the report of a test that ended in a GradingOutcome."""

from __future__ import annotations

import traceback
from pathlib import Path

from .. import jax_internals
from ..outcomes import GradingOutcome, Todo
from . import deadline

MAX_MESSAGE_LINES = 6


def deadline_message(display: str, error: deadline.DeadlineExceeded) -> str:
    if error.deadlock:
        lines = [f"{display} deadlocked: every simulated device waits on a semaphore that no device "
                 f"will signal any more (TPU interpret mode; stopped without waiting out its "
                 f"{error.seconds:g} s deadline)."]
    else:
        lines = [
            f"{display} did not finish within {error.seconds:g} s ({error.set_by}): a wait that "
            f"nothing signals (a DMA or semaphore wait without its start or signal), or a loop "
            f"(pl.loop, lax.while_loop) that never ends.",
        ]
    waits = jax_internals.summary_lines(error.waits)
    if waits:
        lines.append("  What the simulated devices were doing:")
        lines.extend(f"    {line}" for line in waits)
    if error.repeated:
        lines.append("  It hung earlier in this run with exactly these arguments: not run again.")
    elif error.still_running:
        lines.append("  It is a compiled loop that cannot be interrupted: it keeps one CPU core busy "
                     "until this pytest run ends; the other tests still run.")
    else:
        lines.append("  It was stopped; the other tests still run.")
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
        lines.append(f"  {relative(Path(frame.filename), course_root)}:{frame.lineno} in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    text = message.splitlines() or [""]
    if len(text) > MAX_MESSAGE_LINES:
        text = text[:MAX_MESSAGE_LINES] + ["  ..."]
    lines.extend("  " + line for line in text)
    return "\n".join(lines)


def _root_message(error: BaseException) -> str:
    text = str(error)
    if type(error).__name__ == "JaxRuntimeError" or "Traceback (most recent call last)" in text:
        for line in reversed(text.splitlines()):
            head = line.split(":", 1)[0].strip()
            if head.endswith(("Error", "Exception")) and " " not in head:
                return line.strip()
    return f"{type(error).__name__}: {text}"


def relative(path: Path, base: Path | None) -> str:
    """`path` relative to the course root where it lies inside it, else absolute."""
    if base is None:
        return str(path)
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def outcome_report(error: BaseException) -> tuple[str, bool] | None:
    """(the report's text, whether it is a TODO) of a test that raised a GradingOutcome, or
    None: the outcome's message and hypothesis' falsifying example (the reproducer) are
    the whole report, with no traceback into the plugin."""
    outcome = _grading_outcome(error)
    if outcome is None:
        return None
    notes = getattr(error, "__notes__", [])
    return "\n".join([outcome.render(), *_useful_notes(notes)]), isinstance(outcome, Todo)


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


def _useful_notes(notes: list[str]) -> list[str]:
    """Hypothesis' falsifying example, without fixture noise."""
    kept = []
    for note in notes:
        lines = [line for line in str(note).splitlines() if "impl=" not in line and "mesh=factory" not in line]
        if lines:
            kept.append("\n".join(lines))
    return kept
