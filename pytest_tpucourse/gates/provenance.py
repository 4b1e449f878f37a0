"""Where and with what a gate row was produced: device, versions, commit, the graded code's hashes.

Rows are published (bench/records.jsonl is tracked), so provenance carries no host name and
no absolute path: module paths are relative to the graded tree's parent, an --impl-root tree
is named by a label, and `core.paths.shown_in_text` strips the course root and the home directory from
free text before it lands in a row.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Provenance:
    """Where and with what a row was produced."""

    platform: str
    device_kind: str
    jax: str
    jaxlib: str
    libtpu: str | None
    git_commit: str | None
    git_dirty: bool | None
    tree: str  # exercises, solutions, impl-root:<label>
    modules: dict = field(default_factory=dict)  # graded module path -> sha256


def provenance(platform: str, device_kind: str, root: Path, tree: str, modules: dict) -> Provenance:
    import jax
    import jaxlib

    commit, dirty = git_state(root)
    return Provenance(platform=platform, device_kind=device_kind, jax=jax.__version__,
                      jaxlib=jaxlib.__version__, libtpu=_libtpu_version(), git_commit=commit,
                      git_dirty=dirty, tree=tree, modules=dict(modules))


def tree_label(kind: str, tree_root: Path, course_root: Path) -> str:
    """exercises, solutions, or impl-root:<the tree's path relative to the course, else its name>."""
    if kind != "impl-root":
        return kind
    try:
        shown = Path(tree_root).resolve().relative_to(Path(course_root).resolve()).as_posix()
    except ValueError:
        shown = Path(tree_root).name
    return f"impl-root:{shown or '.'}"


def module_hashes(chapter_dir: Path, shown_as: str) -> dict[str, str]:
    """sha256 of every graded module of a chapter (its .py files but the tests), by shown path."""
    chapter_dir = Path(chapter_dir)
    if not chapter_dir.is_dir():
        return {}
    return {f"{shown_as}/{path.name}": sha256(path) for path in sorted(chapter_dir.glob("*.py"))
            if not path.name.startswith("test_") and path.name != "conftest.py"}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it), or (None, None) outside git."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                             env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _libtpu_version() -> str | None:
    from importlib import metadata

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
