"""Whether a course folder is its own git repository: the root of the repository that holds it.

A course unpacked into another repository (a class's repository, a home folder under git, an
archive extracted into a project) sits inside a repository that is not the course's: that
repository's HEAD, commit and advice (`git checkout`) say nothing of the course, so none of it is
read there (gates/provenance.py, learner/shipped.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def is_repository_root(folder: Path) -> bool:
    """`folder` is the top of a git work tree (a clone or a worktree of the course), not a folder
    inside one nor outside any; False where git is missing."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True,
                             timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return False
    if top.returncode != 0 or not top.stdout.strip():
        return False
    return Path(top.stdout.strip()).resolve() == Path(folder).resolve()
