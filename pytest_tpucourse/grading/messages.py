"""A learner's exception as a short message: their deepest frame and the error's own words."""

from __future__ import annotations

import traceback
from pathlib import Path

from . import deadline

MAX_MESSAGE_LINES = 6


def deadline_message(display: str, error: deadline.DeadlineExceeded) -> str:
    lines = [
        f"{display} did not finish within {error.seconds:g} s (--kernel-timeout): a wait that "
        f"nothing signals (a DMA or semaphore wait without its start or signal), or a loop "
        f"(pl.loop, lax.while_loop) that never ends.",
    ]
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
