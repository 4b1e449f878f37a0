"""Whether the graded test files a run collected are the course's, as shipped.

A learner's progress counts only runs of the course's graded tests: a test file replaced by
`def test_softmax(impl): pass` must not mark softmax done. The course's version of a file is
the one in git HEAD of the checkout (`git ls-tree`, one call per run); a file counts as shipped
when its bytes, as this run collected them, are that blob. Outside a git checkout nothing can
be compared and the answer is None (unknown). What this cannot see (a changed test committed
to HEAD) is said in docs/earned.md.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path


def git_blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def head_blobs(course_root: Path, folders: tuple[str, ...]) -> dict[str, str] | None:
    """{path relative to the course root: blob id} of every file under `folders` in git HEAD,
    or None where the course root is no git checkout (or git is missing)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-prefix"], cwd=course_root, capture_output=True,
                             text=True, timeout=30)
        if top.returncode != 0:
            return None
        listed = subprocess.run(["git", "ls-tree", "-r", "-z", "--full-name", "HEAD", "--", *folders],
                                cwd=course_root, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if listed.returncode != 0:
        return None
    prefix = top.stdout.strip()
    blobs = {}
    for line in listed.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if not line:
            continue
        meta, _, path = line.partition("\t")
        if path.startswith(prefix):
            blobs[path[len(prefix):]] = meta.split()[2]
    return blobs


def changed_from_shipped(files: dict[str, bytes], blobs: dict[str, str] | None) -> list[str] | None:
    """The files (course-relative path -> bytes) that are not the course's version: None when
    unknown (no git), else the list (empty: all shipped)."""
    if blobs is None:
        return None
    return [path for path, data in sorted(files.items()) if blobs.get(path) != git_blob_id(data)]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_shipped_conftest(course_root: Path, path: Path) -> bool:
    """A conftest.py of the course as shipped (its bytes are git HEAD's)."""
    try:
        relative = Path(path).resolve().relative_to(Path(course_root).resolve()).as_posix()
        data = Path(path).read_bytes()
    except (ValueError, OSError):
        return False
    folder = relative.split("/", 1)[0] if "/" in relative else "."
    return changed_from_shipped({relative: data}, head_blobs(course_root, (folder,))) == []
