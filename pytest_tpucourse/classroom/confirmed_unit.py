"""The files a confirmation of the learner's exercise holds: what the trusted check's verdict is for.

A verdict is kept for an exercise's *unit* (grading/unit_files.py): its graded module and every
file of the tree it runs. The worker that answered imported the tree, so its word on which files
it ran is the tree's own; the unit kept is what the grader finds from outside that process, with
that word added:
  - every file of the exercise's chapter folder and the folders in it (an autotuning cache the
    kernel reads) but the other exercises' graded modules, the
    graded test files, the files the course ships there (README.md, the capstone's WRITEUP.md and
    capstone.toml: a learner edits them) and an editor's hidden or backup files (a helper
    `_mine.py`, a `notes.txt`, a `lib.zip`);
  - the files the done entry's run counted in the unit (chapter 13's causal_skipping runs forward.py);
  - the files the worker said its calls ran.
Each is hashed before the check and after it: a verdict is kept only where none of its unit's
files changed while it ran (nothing would say which bytes answered). The chapter's folder is kept
with the confirmation, and what of it the unit left out: a file added there later voids it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..core.course import EXERCISES, SOLUTIONS, Course, shipped_names
from ..learner import state

MAX_FILES = 5000  # files of exercises/ hashed at most (a tree is a few dozen)
NOT_IN_UNITS = {"README.md", "conftest.py"}


def snapshot(course: Course) -> dict[str, str]:
    """{path relative to the course: sha256} of every file under exercises/ (caches aside)."""
    found = {}
    root = Path(course.root)
    for folder, directories, files in os.walk(root / EXERCISES):
        directories[:] = sorted(d for d in directories if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if len(found) >= MAX_FILES:
                return found
            path = Path(folder) / name
            try:
                found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
    return found


def folder_of(course: Course, key: str) -> str:
    """The folder (relative to the course) whose learner's files a confirmation of `key` counts."""
    return f"{EXERCISES}/{course.exercise(key).chapter}"


def unit_paths(course: Course, key: str, ran=(), said=()) -> set[str]:
    """The files (relative to the course) counted in exercise `key`'s unit: the learner's files of
    its chapter's folder (state.learners_files) but the other graded modules and the files the
    course ships there, those a run counted (`ran`), and those the worker said it ran (`said`,
    relative to exercises/)."""
    exercise = course.exercise(key)
    others = {e.module_path for e in course.chapter(exercise.chapter).exercises if e.key != key}
    folder = folder_of(course, key)
    # the names the course ships there (exercises/ is the learner's own: solutions/ says them)
    shipped = {f"{folder}/{name}" for name in shipped_names(course.root, exercise.chapter, (SOLUTIONS,)) | NOT_IN_UNITS}
    paths = {exercise.module_path} | (state.learners_files(course.root, folder) - others - shipped)
    paths.update(p for p in ran if isinstance(p, str))
    paths.update(f"{EXERCISES}/{p}" for p in said if isinstance(p, str))
    return paths


def held(paths, before: dict[str, str], after: dict[str, str]) -> dict[str, str] | None:
    """{path: sha256} of the unit where none of its files changed between the two snapshots; None
    where one did (a file neither snapshot holds is not there, and is left out)."""
    unit = {}
    for path in sorted(paths):
        if before.get(path) != after.get(path):
            return None
        if path in before:
            unit[path] = before[path]
    return unit
