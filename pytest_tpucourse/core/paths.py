"""Paths as the learner sees them: relative to the course root where they lie inside it.

Every message, record and page that names a file goes through here, so a path reads the same
in a failure, a gate row and `tpucourse progress`, and no row carries the machine's own
directories.
"""

from __future__ import annotations

import os
from pathlib import Path


def shown(path, root: Path | None) -> str:
    """`path` relative to `root` (POSIX separators) where it lies inside it, else as given."""
    if root is None:
        return str(path)
    try:  # the path as given first: a symlinked file is named as the learner's, not its target
        return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(root))).as_posix()
    except ValueError:
        pass
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def shown_in_text(text: str, root: Path) -> str:
    """Free text with the course root and the home directory taken out of the paths it names."""
    for prefix, replacement in ((str(Path(root).resolve()) + os.sep, ""), (str(Path.home()) + os.sep, "~/")):
        if len(prefix) > 1:
            text = text.replace(prefix, replacement)
    return text
