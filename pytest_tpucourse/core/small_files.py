"""Reading the course's own files in .tpucourse/ (state, records, run markers), and the files of a tree, with a limit.

Those files are the learner's to break: a directory in their place, binary garbage, a
symlink to /dev/zero or to a FIFO. Each read here checks that the path is a regular file,
reads at most `limit` bytes, and says in one line, with the path, what is wrong instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnreadableFile(ValueError):
    """The file exists but cannot be read as one of the course's files; the message says why."""


def read_bytes(path: Path, limit: int) -> bytes | None:
    """The file's bytes, or None when there is no file at `path` (nor a broken link)."""
    path = Path(path)
    try:
        facts = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UnreadableFile(f"{path} cannot be read ({error.strerror or error})") from None
    if stat.S_ISDIR(facts.st_mode):
        raise UnreadableFile(f"{path} is a directory, not a file")
    if not stat.S_ISREG(facts.st_mode):
        raise UnreadableFile(f"{path} is not a regular file (a device, a FIFO or a link to one)")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise UnreadableFile(f"{path} cannot be read ({error.strerror or error})") from None
    if len(data) > limit:
        raise UnreadableFile(f"{path} is larger than {limit:,} bytes")
    return data


def read_text(path: Path, limit: int) -> str | None:
    """The file as UTF-8 text, or None when there is none."""
    data = read_bytes(path, limit)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{path} is not UTF-8 text (byte {error.start} is {data[error.start]:#04x})") from None


def read_own_file(path: Path, limit: int) -> bytes | None:
    """The bytes of the regular file at `path`, never through a link; None where there is none, it is
    a link, a folder, a device or a FIFO, cannot be read, or holds more than `limit` bytes (a file of
    a tree someone else made: what it is not, it says nothing about)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        facts = os.fstat(fd)
        if not stat.S_ISREG(facts.st_mode) or facts.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)
