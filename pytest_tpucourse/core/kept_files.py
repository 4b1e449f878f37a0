"""Folders of files kept across runs (compiled kernel programs, compiles for a TPU), held to a size.

A learner edits a kernel again and again, and every edit compiles programs that the next
edit makes stale: without a bound such a folder grows for the whole course. Each entry
(a file, or a folder of files) is touched when it is used; when a run ends (not at every
compile: a trim reads the whole folder), a folder past its size loses the entries used
longest ago until it is back to three quarters of it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

KEPT_BYTES = 512 * 2 ** 20  # per folder


def touch(entry: Path) -> None:
    """Mark an entry as just used (its modification time)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def trim(folder: Path, limit: int | None = None) -> None:
    """Remove the entries used longest ago while the folder holds more than `limit` bytes
    (KEPT_BYTES by default)."""
    limit = KEPT_BYTES if limit is None else limit
    entries = []
    try:
        for entry in folder.iterdir():
            if entry.name.endswith(".partial"):
                continue  # being written by a run
            entries.append((entry.stat().st_mtime, _size(entry), entry))
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return
    for _, size, entry in sorted(entries):
        if total <= limit * 3 // 4:
            break
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        total -= size


def _size(entry: Path) -> int:
    if entry.is_dir():
        return sum(path.stat().st_size for path in entry.rglob("*") if path.is_file())
    return entry.stat().st_size
