"""Where and with what a gate row was produced: device, versions, commit, the graded code's hashes.

Rows are published (bench/records.jsonl is tracked), so provenance carries no host name and
no absolute path: module paths are relative to the graded tree's parent, an --impl-root tree
is named by a label, and `core.paths.shown_in_text` strips the course root and the home directory from
free text before it lands in a row.

The commit is the checkout's HEAD, flagged dirty when tracked files differ from it; a course folder
that is not its repository's root (unpacked into another repository) has no commit of its own. A copy of the
checkout made without its .git (a machine the tree was sent to), or with a .git older than its files
(HEAD another commit than TPUCOURSE_GIT_COMMIT states, and the tree differing from it), cannot read
it: there the commit is the one TPUCOURSE_GIT_COMMIT states ("<sha>", or "<sha>-dirty" as `git describe --dirty`
marks a changed tree), and the rows say it was stated. Either way `code_at_commit` lets a reader
with the repository check that the commit holds the code whose hashes a row names.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..core.course_git import is_repository_root

COMMIT_VARIABLE = "TPUCOURSE_GIT_COMMIT"  # the commit of a copy of the checkout made without its .git
_STATED_COMMIT = re.compile(r"([0-9a-f]{40})(-dirty)?")


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
    commit_stated: bool = False  # the commit is TPUCOURSE_GIT_COMMIT's: the checkout had no .git

    def commit_note(self) -> str:
        """What a row's notes say of a commit it could not read from git itself."""
        return (f"commit as {COMMIT_VARIABLE} states it (this copy of the checkout has no .git)"
                if self.commit_stated else "")


def provenance(platform: str, device_kind: str, root: Path, tree: str, modules: dict) -> Provenance:
    import jax
    import jaxlib

    commit, dirty, stated = checkout_commit(root)
    return Provenance(platform=platform, device_kind=device_kind, jax=jax.__version__,
                      jaxlib=jaxlib.__version__, libtpu=libtpu_version(), git_commit=commit,
                      git_dirty=dirty, tree=tree, modules=dict(modules), commit_stated=stated)


def checkout_commit(root: Path) -> tuple[str | None, bool | None, bool]:
    """(commit, dirty, stated): the commit whose code the checkout at `root` holds, git's own answer
    unless TPUCOURSE_GIT_COMMIT's wins (`_stated_wins`); `stated` says which."""
    commit, dirty = git_state(root)
    if _stated_wins(commit, dirty, stated_commit()[0]):
        return (*stated_commit(), True)
    return commit, dirty, False


def _stated_wins(head: str | None, dirty: bool | None, stated: str | None) -> bool:
    """Whether the commit TPUCOURSE_GIT_COMMIT states is the row's rather than git's own answer: where
    there is no git, or where the checkout's git is not the tree's (its HEAD another commit and the
    tree differing from it: a copy sent with a .git older than its files). A clean tree at HEAD is
    HEAD's, whatever is stated."""
    return stated is not None and (head is None or (head != stated and bool(dirty)))


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
    """(HEAD's commit, whether tracked files differ from it), or (None, None) outside git and where
    the course is a folder inside another repository (core/course_git.py): that HEAD is not its."""
    if not is_repository_root(root):
        return None, None
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def stated_commit() -> tuple[str | None, bool | None]:
    """(commit, dirty) as TPUCOURSE_GIT_COMMIT states them, or (None, None) when unset or malformed."""
    found = _STATED_COMMIT.fullmatch(os.environ.get(COMMIT_VARIABLE, "").strip())
    return (found.group(1), found.group(2) is not None) if found else (None, None)


def code_at_commit(repo: Path, commit: str, modules: dict) -> list[str] | None:
    """Why `commit` in the repository at `repo` does not hold the code these hashes name: one line per
    module whose file there differs or is missing. None when the repository does not have the commit
    (a shallow clone, a learner's own commit elsewhere): nothing can be checked."""
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    problems = []
    for path, digest in sorted(modules.items()):
        held = _blob_sha256(str(repo), commit, path)
        if held != digest:
            problems.append(f"{path} at {commit[:10]} is " + ("missing" if held is None else "other code")
                            + " than the row's hash names")
    return problems


@functools.lru_cache(maxsize=4096)
def _blob_sha256(repo: str, commit: str, path: str) -> str | None:
    try:
        out = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True, timeout=10,
                             env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return hashlib.sha256(out.stdout).hexdigest() if out.returncode == 0 else None


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10,
                             env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def libtpu_version() -> str | None:
    from importlib import metadata

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
