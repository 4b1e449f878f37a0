"""JSON-lines files that several processes append to: one line per write, and a reader that never stops
at a bad line.

The gate records (records.py), the kept ceiling sweeps (sweeps.py) and bench/device_runs.jsonl
(device_runs.py) are such files. An append is one write() under an exclusive flock, then fsync:
safe under `pytest -n` and Ctrl-C. A writer that died mid-line leaves a torn line; the next append
starts on a fresh line, and `read_objects` reports the torn one (path, line, why) and reads the rest.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.small_files import UnreadableFile, read_bytes

MAX_BYTES = 64 * 1024 * 1024  # a larger file is read as one bad line, not loaded


def append_line(path, text: str) -> None:
    """Append one line of text (one JSON object) to `path`: one write() under an exclusive lock, then fsync."""
    line = (text + "\n").encode("utf-8")
    with locked(Path(path)) as fd:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A writer died mid-line: start on a fresh line so this one stays whole
            # (the torn line is still reported by the reader).
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"{path}: short write ({written} of {len(line)} bytes)")
        os.fsync(fd)


class locked:
    """An exclusive lock on the file itself. A file replaced by renaming (records.repair) is noticed:
    a writer that locked the replaced file sees its inode gone and locks the new one."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __enter__(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    self.fd = fd
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # closing releases the lock


@dataclass(frozen=True)
class BadObjectLine:
    """A line that is not a JSON object, or not one its reader accepts: where, and why."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def read_objects(path, accept=None, max_bytes: int = MAX_BYTES) -> tuple[list[tuple[int, object]], list[BadObjectLine]]:
    """([(line number, what accept(object) made of it)], [bad lines]) of a JSON-lines file; a missing
    file is empty. accept(obj) returns the value to keep or raises ValueError saying why the line is bad."""
    path = Path(path)
    try:
        data = read_bytes(path, max_bytes)
    except UnreadableFile as error:
        return [], [BadObjectLine(path, 0, str(error).removeprefix(f"{path} "))]
    if data is None:
        return [], []
    lines = data.split(b"\n")
    good, bad = [], []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if number == len(lines):
            bad.append(BadObjectLine(path, number, "the last line has no newline: a write was cut short"))
            continue
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError(f"a line is a JSON object, got {type(obj).__name__}")
            good.append((number, accept(obj) if accept else obj))
        except (ValueError, UnicodeDecodeError) as error:
            text = str(error)
            bad.append(BadObjectLine(path, number, text if len(text) <= 200 else text[:200] + "..."))
    return good, bad
