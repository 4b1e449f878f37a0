"""A tree's Python files as the grader reads them for its reports: bounded, never through a link,
and as tokens whatever they hold.

The similarity report and the course-reach evidence (similarity.py, course_reach.py) read the
files of every tree named on the command line, in the grader's process: a tree chooses what they
hold. A file is read only as a regular file inside its tree (not through a link), at most
FILE_BYTES; a tree's files are listed at most FILES deep and FOLDER_DEPTH folders down. Its
tokens are read with Python's own tokenizer, and a file whose source Python cannot decode (an
encoding it lacks, `# -*- coding: rot13 -*-`, or one only a codec the tree registers at run time
knows) is an UnreadableSource saying why, never an error of the report.
"""

from __future__ import annotations

import io
import os
import tokenize
from pathlib import Path

from ..core.small_files import read_own_file

FILE_BYTES = 1 << 20
FILES = 2_000  # files of one tree listed at most
FOLDER_DEPTH = 16  # folders below the tree's root listed at most


class UnreadableSource(ValueError):
    """A file Python cannot read as source; the message says why."""


def read(path: Path) -> bytes | None:
    """The file's bytes: a regular file, never through a link, at most FILE_BYTES; else None."""
    return read_own_file(path, FILE_BYTES)


def tokens(source: bytes):
    """The file's tokens (tokenize.TokenInfo), as far as they can be read: a file cut short or with
    a syntax error yields those before it. UnreadableSource when Python cannot decode it at all."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError, ValueError) as error:
        raise UnreadableSource(f"Python cannot read it as source ({type(error).__name__}: {error})") from None
    try:
        yield from tokenize.tokenize(io.BytesIO(source).readline)
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError, ValueError):
        return  # what could be read is what is read


def inside(path: Path, tree: Path) -> bool:
    """Whether `path`, links resolved, is a file of `tree`."""
    return Path(os.path.realpath(tree)) in Path(os.path.realpath(path)).parents


def python_files(tree: Path) -> list[Path]:
    """The tree's .py files (sorted), listed without following a link, within FILES and FOLDER_DEPTH."""
    return tree_files(tree, suffix=".py")


def tree_files(tree: Path, suffix: str = "") -> list[Path]:
    """The tree's regular files whose names end in `suffix` (sorted), listed without following a
    link, within FILES and FOLDER_DEPTH, caches aside."""
    found, pending = [], [(Path(tree), 0)]
    while pending and len(found) < FILES:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue
        for entry in listed:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if depth < FOLDER_DEPTH and entry.name != "__pycache__":
                    pending.append((Path(entry.path), depth + 1))
            elif entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
    return sorted(found[:FILES])
