"""bench/device_runs.jsonl: the course's own runs on a chip, one JSON line per run.

Each line says which code ran where and what came of it, per chapter:

    {"date": "2026-12-05", "device_kind": "TPU v5 lite", "jax": "0.10.2", "libtpu": "0.0.42.1",
     "commit": "<the commit whose code ran>", "kind": "solutions", "seconds": 412.3,
     "chapters": {"ch11": {"passed": 49, "failed": 0, "skipped": 0, "seconds": 61.2}, ...}}

`kind` is one of KINDS: the shipped solutions natively (`solutions`), the stubs (`stubs`, whose
chapters also count `not_todo`: stub failures whose message is not "not written yet"), the
honest corpus (`honest`, with the `variant` set it ran: tests/honest/chNN/<variant>/) and a
gate run of the solutions (`gates`). bench/device_runs.py makes and appends them; docs/tpu.md
shows the latest. A line is checked when written and when read: a malformed one is reported,
never taken.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

PATH = "bench/device_runs.jsonl"
KINDS = ("solutions", "stubs", "honest", "gates")
FIELDS = ("date", "device_kind", "jax", "libtpu", "commit", "kind", "seconds", "chapters")
COUNTS = ("passed", "failed", "skipped")


def problems(entry: dict) -> list[str]:
    """What is wrong with one line (empty: a good line)."""
    if not isinstance(entry, dict):
        return ["not a JSON object"]
    found = [f"no {name!r}" for name in FIELDS if name not in entry]
    if found:
        return found
    if entry["kind"] not in KINDS:
        found.append(f"kind {entry['kind']!r} is none of {', '.join(KINDS)}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(entry["date"])):
        found.append(f"date {entry['date']!r} is not YYYY-MM-DD")
    if not re.fullmatch(r"[0-9a-f]{7,40}", str(entry["commit"])):
        found.append(f"commit {entry['commit']!r} is not a git commit")
    if not isinstance(entry["seconds"], (int, float)) or entry["seconds"] < 0:
        found.append("seconds is not a non-negative number")
    chapters = entry["chapters"]
    if not isinstance(chapters, dict) or not chapters:
        return found + ["chapters is not a non-empty object"]
    for chapter, counts in chapters.items():
        if not re.fullmatch(r"ch\d\d", chapter):
            found.append(f"{chapter!r} is not a chapter id")
            continue
        wanted = COUNTS + ("not_todo",) if entry["kind"] == "stubs" else COUNTS
        for name in wanted:
            if not isinstance(counts, dict) or not isinstance(counts.get(name), int) or counts[name] < 0:
                found.append(f"{chapter}: {name} is not a count")
        if isinstance(counts, dict) and not isinstance(counts.get("seconds"), (int, float)):
            found.append(f"{chapter}: seconds is not a number")
    if entry["kind"] == "honest" and not entry.get("variant"):
        found.append("an honest run names no variant set")
    return found


def append(path: Path, entry: dict) -> None:
    """Add one checked line, whole (one write of the line and its newline, then fsync)."""
    wrong = problems(entry)
    if wrong:
        raise ValueError(f"not a device run: {'; '.join(wrong)}")
    data = (json.dumps(entry, sort_keys=False) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read(path: Path) -> tuple[list[dict], list[str]]:
    """(the good lines, a problem per bad line) of a device-runs file; a missing file holds none."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    entries, bad = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as error:
            bad.append(f"line {number}: not JSON ({error})")
            continue
        wrong = problems(entry)
        if wrong:
            bad.append(f"line {number}: {'; '.join(wrong)}")
        else:
            entries.append(entry)
    return entries, bad


def latest(entries: list[dict]) -> dict[tuple, dict]:
    """The last line of each (kind, variant, device kind): what docs/tpu.md's table shows."""
    found = {}
    for entry in entries:
        found[(entry["kind"], entry.get("variant", ""), entry["device_kind"])] = entry
    return found


def table_lines(entries: list[dict]) -> list[str]:
    """A Markdown table of the latest run of each kind: chapter by chapter, passed/failed/skipped."""
    rows = sorted(latest(entries).values(), key=lambda e: (KINDS.index(e["kind"]), e.get("variant", "")))
    if not rows:
        return ["(no device runs recorded)"]
    chapters = sorted({c for e in rows for c in e["chapters"]})
    lines = ["| run | date | device | commit | seconds | " + " | ".join(chapters) + " |",
             "|---|---|---|---|---|" + "---|" * len(chapters)]
    for e in rows:
        name = e["kind"] + (f" ({e['variant']})" if e.get("variant") else "")
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
        lines.append(f"| {name} | {e['date']} | {e['device_kind']}, jax {e['jax']}, libtpu {e['libtpu']} | "
                     f"{e['commit'][:10]} | {e['seconds']:.0f} | " + " | ".join(cells) + " |")
    return lines


DOCS = "docs/tpu.md"
_TABLE = re.compile(r"(<!-- device-runs -->\n).*?(<!-- /device-runs -->)", re.S)


def docs_with_table(text: str, entries: list[dict]) -> str:
    """docs/tpu.md's text with its table of the latest runs made from `entries`."""
    if not _TABLE.search(text):
        raise ValueError(f"{DOCS} has no <!-- device-runs --> section")
    return _TABLE.sub(lambda m: m.group(1) + "\n".join(table_lines(entries)) + "\n" + m.group(2), text)
