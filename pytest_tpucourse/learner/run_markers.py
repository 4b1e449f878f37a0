"""Runs that ended without their summary: the "run started" marker of each course run.

Pytest cannot stop graded code that calls `os._exit(0)` (at import or in a kernel), and a
process killed from outside says nothing either: the exit status may even be 0, with no
summary and no state written. So each run of a course checkout writes a marker when it
starts and removes it once its summary is written. A marker whose process is gone is a run
that ended without its summary: the next run and `tpucourse progress` say so. Only runs of
the learner's own tree (exercises/) write one: `tpucourse grade` runs other trees in the same
checkout and has its own end-of-run record (classroom/record.py), a tree without it a crash.

The format, for other tools (`tpucourse grade`): one JSON file per run,
`.tpucourse/runs/<run id>.json`, holding {"run": id, "pid": int, "started": ISO date (UTC),
"args": [pytest's arguments], "tree": "exercises" | "solutions" | "impl-root", "test_files":
[course-relative paths collected, filled in after collection]}. `reached_summary(course_root,
run_id)` answers for one run; `ended_without_summary(course_root)` lists the markers whose
process is gone, oldest first. A run that reaches its summary removes its marker and those
of earlier unfinished runs of the same test files (which it has now run to the end), or, for
one stopped before it named any test file, of the same command.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core import untrusted_json
from ..core.small_files import UnreadableFile, read_text
from .state import STATE_DIR, atomic_write_text, now

RUNS_DIR = "runs"
MAX_BYTES = 1024 * 1024
MARKER_DEPTH = 8  # a marker nests 2 deep (its test files)


@dataclass(frozen=True)
class UnfinishedRun:
    run: str
    pid: int
    started: str
    args: tuple[str, ...]
    tree: str
    test_files: tuple[str, ...]
    path: Path

    def describe(self) -> str:
        what = ", ".join(self.test_files[:3]) + (" ..." if len(self.test_files) > 3 else "") \
            if self.test_files else ("pytest " + " ".join(self.args)).strip()
        return (f"the run of {what} started {self.started} (pid {self.pid}) ended without its summary: "
                f"graded code called os._exit(), or the process was killed; nothing of it was recorded")


def runs_dir(course_root: Path) -> Path:
    return Path(course_root) / STATE_DIR / RUNS_DIR


def marker_path(course_root: Path, run_id: str) -> Path:
    return runs_dir(course_root) / f"{run_id}.json"


def start(course_root: Path, run_id: str, args, tree: str) -> Path:
    """Write this run's marker; returns its path."""
    path = marker_path(course_root, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, {"run": run_id, "pid": os.getpid(), "started": now(), "args": [str(a) for a in args],
                  "tree": tree, "test_files": []})
    return path


def collected(path: Path, test_files) -> None:
    """The test files the run collected, into its marker."""
    data = _read(path)
    if data is not None:
        data["test_files"] = sorted(set(test_files))
        _write(path, data)


def summary_written(course_root: Path, path: Path) -> None:
    """The run wrote its summary: remove its marker, and those of unfinished earlier runs of
    the same test files."""
    data = _read(path) or {}
    files = set(data.get("test_files") or ())
    args = tuple(map(str, data.get("args") or ()))
    with contextlib.suppress(OSError):
        path.unlink()
    for earlier in ended_without_summary(course_root):
        # One that ended before its collection did names no test file: the same command, run to its
        # summary now, is what the learner ran again.
        if (files and set(earlier.test_files) <= files) or (not earlier.test_files and earlier.args == args):
            with contextlib.suppress(OSError):
                earlier.path.unlink()


def reached_summary(course_root: Path, run_id: str) -> bool:
    """Whether the run `run_id` reached its summary (its marker is gone); a run still in progress
    has not."""
    return not marker_path(course_root, run_id).exists()


def ended_without_summary(course_root: Path) -> list[UnfinishedRun]:
    """The markers of runs whose process is gone, oldest first."""
    found = []
    folder = runs_dir(course_root)
    if not folder.is_dir():
        return found
    for path in folder.glob("*.json"):
        data = _read(path)
        if data is None or not isinstance(data.get("pid"), int):
            continue
        if data["pid"] == os.getpid() or _alive(data["pid"]):
            continue  # a run in progress (this one, or another)
        found.append(UnfinishedRun(run=str(data.get("run", path.stem)), pid=data["pid"],
                                   started=str(data.get("started", "?")),
                                   args=tuple(map(str, data.get("args") or ())), tree=str(data.get("tree", "?")),
                                   test_files=tuple(map(str, data.get("test_files") or ())), path=path))
    return sorted(found, key=lambda run: run.started)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> dict | None:
    try:
        text = read_text(path, MAX_BYTES)
        data = untrusted_json.loads(text, depth=MARKER_DEPTH) if text is not None else None
    except (UnreadableFile, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write(path: Path, data: dict) -> None:
    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
