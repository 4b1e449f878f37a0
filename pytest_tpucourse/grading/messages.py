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
            f"{display} did not finish within {error.seconds:g} s ({error.set_by}; compiling is not "
            f"counted): a wait that nothing signals (a DMA or semaphore wait without its start or "
            f"signal), a loop (pl.loop, lax.while_loop) that never ends, or a computation that runs "
            f"longer than that.",
        ]
    waits = jax_internals.summary_lines(error.waits)
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
        lines.append(f"  {relative(Path(frame.filename), course_root)}:{frame.lineno} in {frame.name}")
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
    message = (_root_message(error).splitlines() or [""])[0].strip()
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if learner_path is not None and Path(f.filename).resolve() == learner_path.resolve()]
    where = f" ({relative(Path(frames[-1].filename), course_root)}:{frames[-1].lineno})" if frames else ""
    return f"{display} raised {message}{where}"


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
    notes = [] if REPRODUCTION_MARK in text else _useful_notes(getattr(error, "__notes__", []))
    return "\n".join([text, *notes]), isinstance(outcome, Todo), outcome.headline


REPRODUCTION_MARK = "\n  reproduce ("  # where reproduction.py's lines start in a message


def without_reproduction(text: str) -> str:
    """A report without its reproduction lines: what two tests failing the same way share."""
    return text.split(REPRODUCTION_MARK, 1)[0].split("\n  its inputs (", 1)[0]


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


def _useful_notes(notes: list[str]) -> list[str]:
    """Hypothesis' falsifying example, without fixture noise or advice to edit the test."""
    kept = []
    for note in notes:
        lines = [line for line in str(note).splitlines()
                 if "impl=" not in line and "mesh=factory" not in line
                 and not any(advice in line for advice in _HYPOTHESIS_ADVICE)]
        if any(line.strip() for line in lines):
            kept.append("\n".join(lines))
    return kept
