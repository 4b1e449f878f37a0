"""The learner's state file: `.tpucourse/state.json` at the course root.

It holds what pytest runs observed about the learner's own exercises (never a
--solutions or --impl-root run), how many hints of each exercise were shown, and
the self-test items the learner ticked (`tpucourse tick`: their word, not a test's).
`tpucourse progress`, `hint` and `watch` read it.

Every change is read-modify-write under an exclusive lock (`.tpucourse/state.lock`),
so concurrent runs and pytest-xdist never lose an update, and is written to a
temporary file, fsynced, then renamed over the old one: a run killed mid-write
leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..course import EXERCISES
from .status import Status

STATE_DIR = ".tpucourse"
STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
VERSION = 1

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class CorruptState(Exception):
    """The state file exists but is not a state file this version can read."""


def state_path(course_root: Path) -> Path:
    return Path(course_root) / STATE_DIR / STATE_FILE


def empty() -> dict:
    return {"version": VERSION, "exercises": {}, "hints": {}, "ticks": {}}


def read(course_root: Path) -> dict:
    """The state, or an empty one when no run has written it yet."""
    path = state_path(course_root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return empty()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise CorruptState(f"{path} is not valid JSON ({error}); delete it to start afresh") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise CorruptState(f"{path} is not a version-{VERSION} tpucourse state file; delete it to start afresh")
    data.setdefault("exercises", {})
    data.setdefault("hints", {})
    data.setdefault("ticks", {})
    statuses = {status.value for status in Status}
    if not (isinstance(data["exercises"], dict)
            and all(isinstance(e, dict) and e.get("status") in statuses for e in data["exercises"].values())
            and isinstance(data["hints"], dict)
            and all(isinstance(n, int) and not isinstance(n, bool) for n in data["hints"].values())
            and isinstance(data["ticks"], dict)
            and all(isinstance(items, list) for items in data["ticks"].values())):
        raise CorruptState(f"{path} has fields of the wrong type (exercises, hints and ticks are objects); "
                           f"delete it to start afresh")
    return data


@contextlib.contextmanager
def _locked(course_root: Path):
    directory = Path(course_root) / STATE_DIR
    directory.mkdir(exist_ok=True)
    with open(directory / LOCK_FILE, "a+") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old or the new file, whole."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def update(course_root: Path, change) -> dict:
    """Apply `change(state)` (it edits the dict in place) under the lock; return the new state."""
    with _locked(course_root):
        data = read(course_root)
        change(data)
        atomic_write_text(state_path(course_root), json.dumps(data, indent=1, sort_keys=True) + "\n")
        return data


def file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def record_results(course, results) -> dict:
    """Store what a run of the learner's tree showed: {exercise key: ExerciseResults}, and the
    chapter the learner now works in (next_up.py).

    Exercises the run did not touch keep their earlier entry. A partial run (some
    tests not run, none failed) does not replace an earlier done: it neither shows
    the exercise complete nor shows it broken.
    """
    from .next_up import chapter_worked_in

    stamp = now()

    def change(data):
        touched = []
        for key, entry in results.items():
            status = entry.status
            if status == Status.NOT_RUN:
                continue
            if entry.exercise.chapter not in touched:
                touched.append(entry.exercise.chapter)
            previous = data["exercises"].get(key)
            if status == Status.PARTIAL and previous is not None and previous["status"] == Status.DONE:
                continue
            exercise = entry.exercise
            data["exercises"][key] = {
                "status": status,
                "tree": EXERCISES,
                "tests_passed": len(entry.passed),
                "tests_failed": len(entry.failed | entry.todo),
                "tests_total": len(entry.collected | entry.deselected),
                "message": entry.first_message.removeprefix("TODO: "),
                "module_sha256": file_digest(Path(course.root) / exercise.module_path),
                "date": stamp,
            }
            if entry.compiler_unchecked:  # done, but its compiler checks could not run here
                data["exercises"][key]["compiler_unchecked"] = [
                    len(entry.compiler_unchecked), next(iter(entry.compiler_unchecked.values()))]
        order = [c.id for c in course.chapters]
        worked_in = chapter_worked_in(course, data, sorted(touched, key=order.index))
        if worked_in is not None:
            data["working_chapter"] = worked_in

    return update(course.root, change)


def exercise_status(course_root: Path, data: dict, exercise) -> Status:
    """done / failed / todo / partial / changed (passed, edited since) / not run."""
    entry = data["exercises"].get(exercise.key)
    if entry is None:
        return Status.NOT_RUN
    if entry["status"] == Status.DONE:
        current = file_digest(Path(course_root) / exercise.module_path)
        if current != entry.get("module_sha256"):
            return Status.CHANGED
    return Status(entry["status"])


def hints_shown(data: dict, key: str) -> int:
    return int(data["hints"].get(key, 0))
