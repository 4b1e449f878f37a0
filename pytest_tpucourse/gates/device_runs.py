"""bench/device_runs.jsonl: one line per run of the course on an accelerator, what it ran and how long.

A line is one JSON object:
    {"date", "device_kind", "jax", "libtpu", "commit", "kind", "seconds",
     "chapters": {"chNN": {"passed", "failed", "skipped", "seconds"}}}
`kind` says what ran ("gates": `pytest --gates --solutions` on the chip, written by the run itself;
other kinds by the scripts that run the course on a device); `commit` is the commit whose code
ran, "<sha>-dirty" (as `git describe --dirty` marks it) when the checkout differed from it, null
when unknown; `seconds` is the run's wall time, each chapter's the time of its tests.

`append` refuses a line that is not of this form and appends it atomically (json_lines.py);
`read` validates every line and reports the ones that are not (path, line, why) instead of
stopping at them.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from . import json_lines

PATH = Path("bench") / "device_runs.jsonl"  # under the course root
FIELDS = ("date", "device_kind", "jax", "libtpu", "commit", "kind", "seconds", "chapters")
CHAPTER_FIELDS = ("passed", "failed", "skipped", "seconds")
GATES = "gates"  # the kind a gate run writes
_COMMIT = re.compile(r"[0-9a-f]{40}(-dirty)?")
_KIND = re.compile(r"[a-z][a-z0-9-]*")
_CHAPTER = re.compile(r"ch\d\d")


def commit_label(commit: str | None, dirty: bool | None) -> str | None:
    """The line's commit: the sha, marked -dirty when the checkout differed from it."""
    if not commit:
        return None
    return f"{commit}-dirty" if dirty else commit


@dataclass(frozen=True)
class DeviceRun:
    date: str  # UTC, ISO 8601
    device_kind: str
    jax: str
    libtpu: str | None
    commit: str | None  # "<sha>" or "<sha>-dirty"; None when the run could not tell
    kind: str
    seconds: float
    chapters: dict  # chNN -> {"passed": n, "failed": n, "skipped": n, "seconds": s}

    def __post_init__(self):
        problems = _problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, line: dict) -> DeviceRun:
        if set(line) != set(FIELDS):
            missing, unknown = set(FIELDS) - set(line), set(line) - set(FIELDS)
            raise ValueError("; ".join(filter(None, (missing and f"missing {sorted(missing)}",
                                                     unknown and f"unknown fields {sorted(unknown)}"))))
        return cls(**line)


def _seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _problems(line: dict) -> list[str]:
    """Why a line is not a device run, field by field (empty when it is one)."""
    problems = []
    try:
        datetime.datetime.fromisoformat(line["date"])
    except (TypeError, ValueError):
        problems.append(f"date is an ISO 8601 date and time, got {line['date']!r}")
    for name in ("device_kind", "jax"):
        if not (isinstance(line[name], str) and line[name]):
            problems.append(f"{name} is a non-empty string, got {line[name]!r}")
    if not (line["libtpu"] is None or isinstance(line["libtpu"], str)):
        problems.append(f"libtpu is a version or null, got {line['libtpu']!r}")
    if not (line["commit"] is None or (isinstance(line["commit"], str) and _COMMIT.fullmatch(line["commit"]))):
        problems.append(f"commit is a 40-digit sha, maybe ending -dirty, or null, got {line['commit']!r}")
    if not (isinstance(line["kind"], str) and _KIND.fullmatch(line["kind"])):
        problems.append(f"kind is a lowercase word (gates, ...), got {line['kind']!r}")
    if not _seconds(line["seconds"]):
        problems.append(f"seconds is a number of seconds, got {line['seconds']!r}")
    chapters = line["chapters"]
    if not isinstance(chapters, dict):
        return problems + [f"chapters maps chNN to its counts, got {type(chapters).__name__}"]
    for chapter, counts in chapters.items():
        if not (isinstance(chapter, str) and _CHAPTER.fullmatch(chapter)):
            problems.append(f"chapters: {chapter!r} is not a chapter (chNN)")
        elif not (isinstance(counts, dict) and set(counts) == set(CHAPTER_FIELDS)
                  and all(_count(counts[name]) for name in ("passed", "failed", "skipped"))
                  and _seconds(counts["seconds"])):
            problems.append(f"chapters: {chapter} is {{passed, failed, skipped: counts, seconds}}, got {counts!r}")
    return problems


def append(path, run: DeviceRun) -> None:
    """Append one run's line (already validated: a DeviceRun is one) atomically."""
    json_lines.append_line(path, run.to_json())


def read(path) -> tuple[list[DeviceRun], list[json_lines.BadObjectLine]]:
    """Every valid line of a device-runs file, and every other line with its path, number and why."""
    found, bad = json_lines.read_objects(path, DeviceRun.from_dict)
    return [run for _, run in found], bad
