"""Whether the graded test files a run collected are the course's, as shipped.

A learner's progress counts only runs of the course's graded tests: a test file replaced by
`def test_softmax(impl): pass` must not mark softmax done. What the course shipped is its own
record, shipped.json at the course root: the sha256 of each graded test file (exercises/**/test_*.py)
and of each conftest.py, made when the course is built (`tpucourse shipped`, an author's tool;
tests/test_shipped.py holds it current). So a clone, a folder with no git and a course extracted
into another repository grade alike: no repository's HEAD is read. A file counts as shipped when
its bytes, as this run collected them (line endings as LF), hash to the record's. A course without
a record answers None (unknown). What this cannot see (a record edited with the file) is said in
docs/earned.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from pathlib import Path

MANIFEST = "shipped.json"
# Where the course's conftest files may lie (the root's own, and any under these folders).
_CONFTEST_FOLDERS = ("exercises", "solutions", "tests")


def digest(data: bytes) -> str:
    """A shipped file's hash: sha256 of its bytes, CRLF read as LF (a checkout on Windows is the same file)."""
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def covered(course_root: Path) -> list[str]:
    """The course-relative paths the record holds: every exercises/**/test_*.py and every conftest.py
    (the root's, and those under exercises/, solutions/, tests/)."""
    root = Path(course_root)
    found = {"conftest.py"} if (root / "conftest.py").is_file() else set()
    exercises = root / "exercises"
    if exercises.is_dir():
        found |= {p.relative_to(root).as_posix() for p in exercises.rglob("test_*.py")
                  if p.is_file() and not _ignored(p.relative_to(root))}
    for folder in _CONFTEST_FOLDERS:
        if (root / folder).is_dir():
            found |= {p.relative_to(root).as_posix() for p in (root / folder).rglob("conftest.py")
                      if p.is_file() and not _ignored(p.relative_to(root))}
    return sorted(found)


def _ignored(relative: Path) -> bool:
    """A folder no course ships (a virtualenv, caches, a run's outputs)."""
    return any(part.startswith(".") or part in ("__pycache__", "build", "dist") for part in relative.parts[:-1])


def build(course_root: Path) -> dict:
    """The record of the course as it is now at `course_root`."""
    root = Path(course_root)
    return {"about": "the course's shipped graded test files and conftest files, sha256 of each with line "
                     "endings as LF; written by `tpucourse shipped` (docs/earned.md)",
            "files": {path: digest((root / path).read_bytes()) for path in covered(root)}}


def text(record: dict) -> str:
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def write(course_root: Path) -> Path:
    path = Path(course_root) / MANIFEST
    path.write_text(text(build(course_root)), encoding="utf-8")
    return path


def record(course_root: Path) -> dict[str, str] | None:
    """{course-relative path: digest} of the course's shipped files, or None where the course has no
    readable record (nothing can be compared)."""
    path = Path(course_root) / MANIFEST
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _read(path: str, _mtime_ns: int, _size: int) -> dict[str, str] | None:
    try:
        files = json.loads(Path(path).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return None
    return files


def changed_from_shipped(files: dict[str, bytes], shipped: dict[str, str] | None) -> list[str] | None:
    """The files (course-relative path -> bytes) that are not the course's version: None when
    unknown (no record), else the list (empty: all shipped)."""
    if shipped is None:
        return None
    return [path for path, data in sorted(files.items()) if shipped.get(path) != digest(data)]


def is_shipped_conftest(course_root: Path, path: Path) -> bool:
    """A conftest.py of the course as shipped (its bytes are the record's)."""
    try:
        relative = Path(path).resolve().relative_to(Path(course_root).resolve()).as_posix()
        data = Path(path).read_bytes()
    except (ValueError, OSError):
        return False
    return changed_from_shipped({relative: data}, record(course_root)) == []


def restore_advice(course_root: Path, paths: list[str]) -> str:
    """How to put these files back as shipped: `git checkout` only where the course root is a git
    repository's own root whose HEAD holds each file's shipped bytes (a clone of the course);
    elsewhere (no git, or a course inside another repository) a fresh copy of the course."""
    shipped = record(course_root) or {}
    them = "it" if len(paths) == 1 else "them"
    if paths and all(_head_bytes_digest(course_root, path) == shipped.get(path) for path in paths):
        return f"git checkout -- {' '.join(paths)} restores {them}"
    return f"copy {them} back from a fresh copy of the course ({MANIFEST} records the shipped bytes)"


def _head_bytes_digest(course_root: Path, path: str) -> str | None:
    from ..core.course_git import is_repository_root

    if not is_repository_root(course_root):
        return None
    try:
        shown = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=course_root, capture_output=True, timeout=30,
                               env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return None
    return digest(shown.stdout) if shown.returncode == 0 else None
