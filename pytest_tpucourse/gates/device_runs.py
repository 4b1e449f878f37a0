"""bench/device_runs.jsonl: the course's own runs on a chip, one JSON line per run, what it ran and how long.

A line is one JSON object:
    {"date", "device_kind", "jax", "libtpu", "commit", "kind", "seconds",
     "chapters": {"chNN": {"passed", "failed", "skipped", "seconds"}}}
`kind` is one of KINDS: the shipped solutions natively (`solutions`), the stubs (`stubs`, whose
chapters also count `not_todo`: stub failures whose message is not "not written yet"), the honest
corpus (`honest`, naming the `variant` set it ran: tests/honest/chNN/<variant>/) and a gate run of
the solutions (`gates`, written by the run itself: run/gate_progress.py). bench/device_runs.py runs
the other kinds on a chip and appends their lines; docs/tpu.md shows the latest of each. `commit`
is the commit whose code ran, "<sha>-dirty" (as `git describe --dirty` marks it) when the checkout
differed from it, null when unknown; `seconds` is the run's wall time, each chapter's the time of
its tests. A run that did not end by itself says why in `stopped` (interrupted at a time budget:
its counts are of the tests it reached).

A run may hold some chapters only (a slice of the whole, bench/device_runs.py --chapters): docs/tpu.md
takes each chapter of each kind from the latest line that ran it, and shows every line that is the
latest for some chapter.

`append` refuses a line that is not of this form and appends it atomically (json_lines.py); `read`
validates every line and reports the ones that are not (path, line, why) instead of stopping at them.
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
DOCS = Path("docs") / "tpu.md"  # its table of the latest runs (docs_with_table)
FIELDS = ("date", "device_kind", "jax", "libtpu", "commit", "kind", "seconds", "chapters")
OPTIONAL = ("variant", "stopped")  # the honest corpus's variant set; why a run ended early
CHAPTER_FIELDS = ("passed", "failed", "skipped", "seconds")
STUBS_FIELDS = CHAPTER_FIELDS + ("not_todo",)
GATES = "gates"  # the kind a gate run writes
KINDS = ("solutions", "stubs", "honest", GATES)
_COMMIT = re.compile(r"[0-9a-f]{40}(-dirty)?")
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
    chapters: dict  # chNN -> {"passed": n, "failed": n, "skipped": n, "seconds": s} (stubs: and "not_todo")
    variant: str | None = None  # an honest run's variant set
    stopped: str | None = None  # why the run ended before its last test (a time budget), None when it did not

    def as_dict(self) -> dict:
        line = asdict(self)
        for name in OPTIONAL:
            if line[name] is None:
                del line[name]
        return line

    def __post_init__(self):
        problems = _problems(asdict(self))
        if problems:
            raise ValueError("; ".join(problems))

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, line: dict) -> DeviceRun:
        if not set(FIELDS) <= set(line) <= set(FIELDS + OPTIONAL):
            missing, unknown = set(FIELDS) - set(line), set(line) - set(FIELDS + OPTIONAL)
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
    if line["kind"] not in KINDS:
        problems.append(f"kind is one of {', '.join(KINDS)}, got {line['kind']!r}")
    if (line["kind"] == "honest") != bool(line.get("variant")):
        problems.append("an honest run names its variant set, and only an honest run names one")
    if not (line.get("stopped") is None or (isinstance(line["stopped"], str) and line["stopped"])):
        problems.append(f"stopped says why the run ended early, or is absent, got {line['stopped']!r}")
    if not _seconds(line["seconds"]):
        problems.append(f"seconds is a number of seconds, got {line['seconds']!r}")
    chapters = line["chapters"]
    if not isinstance(chapters, dict):
        return problems + [f"chapters maps chNN to its counts, got {type(chapters).__name__}"]
    for chapter, counts in chapters.items():
        if not (isinstance(chapter, str) and _CHAPTER.fullmatch(chapter)):
            problems.append(f"chapters: {chapter!r} is not a chapter (chNN)")
        elif not (isinstance(counts, dict)
                  and set(counts) == set(STUBS_FIELDS if line["kind"] == "stubs" else CHAPTER_FIELDS)
                  and all(_count(counts[name]) for name in set(counts) - {"seconds"})
                  and _seconds(counts["seconds"])):
            wanted = "passed, failed, skipped" + (", not_todo" if line["kind"] == "stubs" else "")
            problems.append(f"chapters: {chapter} is {{{wanted}: counts, seconds}}, got {counts!r}")
    return problems


def append(path, run: DeviceRun) -> None:
    """Append one run's line (already validated: a DeviceRun is one) atomically."""
    json_lines.append_line(path, run.to_json())


def read(path) -> tuple[list[DeviceRun], list[json_lines.BadObjectLine]]:
    """Every valid line of a device-runs file, and every other line with its path, number and why."""
    found, bad = json_lines.read_objects(path, DeviceRun.from_dict)
    return [run for _, run in found], bad


def latest(runs: list[DeviceRun]) -> list[dict]:
    """The lines docs/tpu.md's table shows, each with only the chapters it is the latest for: per
    (kind, variant, device kind) and chapter, the last line that ran that chapter. A whole run's line
    holds every chapter; after it, a slice's line takes over the chapters it ran. A line that ran no
    chapter (a gate run stopped before its first test) is shown while nothing later replaces it."""
    owner: dict[tuple, int] = {}
    for index, run in enumerate(runs):
        group = (run.kind, run.variant or "", run.device_kind)
        if run.chapters:
            owner.pop((*group, ""), None)
        for chapter in run.chapters or {"": None}:
            owner[(*group, chapter)] = index
    shown = {}
    for (*_, chapter), index in owner.items():
        line = shown.setdefault(index, {**runs[index].as_dict(), "chapters": {}})
        if chapter:
            line["chapters"][chapter] = runs[index].chapters[chapter]
    return [shown[index] for index in sorted(shown)]


def table_lines(runs: list[DeviceRun]) -> list[str]:
    """A Markdown table of the latest runs of each kind: chapter by chapter, passed/failed/skipped."""
    rows = sorted(latest(runs), key=lambda e: (KINDS.index(e["kind"]), e.get("variant", "")))
    if not rows:
        return ["(no device runs recorded)"]
    chapters = sorted({c for e in rows for c in e["chapters"]})
    lines = ["| run | date | device | commit | seconds | " + " | ".join(chapters) + " |",
             "|---|---|---|---|---|" + "---|" * len(chapters)]
    for e in rows:
        name = e["kind"] + (f" ({e['variant']})" if e.get("variant") else "") + (
            f", {e['stopped']}" if e.get("stopped") else "")
        cells = []
        for chapter in chapters:
            c = e["chapters"].get(chapter)
            if c is None:
                cells.append("")
                continue
            cell = f"{c['passed']}/{c['failed']}/{c['skipped']}"
            if e["kind"] == "stubs":
                cell += f" ({c['not_todo']} not TODO)"
            cells.append(cell)
        lines.append(f"| {name} | {e['date'][:10]} | {e['device_kind']}, jax {e['jax']}, libtpu {e['libtpu']} | "
                     f"{(e['commit'] or 'unknown')[:10]}{'-dirty' if (e['commit'] or '').endswith('-dirty') else ''} | "
                     f"{e['seconds']:.0f} | " + " | ".join(cells) + " |")
    return lines


_TABLE = re.compile(r"(<!-- device-runs -->\n).*?(<!-- /device-runs -->)", re.S)


def docs_with_table(text: str, entries: list[dict]) -> str:
    """docs/tpu.md's text with its table of the latest runs made from `entries`."""
    if not _TABLE.search(text):
        raise ValueError(f"{DOCS} has no <!-- device-runs --> section")
    return _TABLE.sub(lambda m: m.group(1) + "\n".join(table_lines(entries)) + "\n" + m.group(2), text)
