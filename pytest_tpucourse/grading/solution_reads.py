"""Which files under solutions/ the learner's tree opened while it was imported and called.

A learner's module that reads a shipped solution (to exec it, to take it apart, to copy it
into itself) does so through `open`, which Python reports to audit hooks (PEP 578:
`open()`, `io.open_code` under import and runpy, `os.open`). One hook per process
(`sys.addaudithook` cannot be undone) records, while a run grades the learner's
exercises/, each opening of a file that is a shipped solution's (by path under solutions/,
or by inode: a hardlink or a symlink elsewhere) made with a frame of the graded tree on the
stack. Every file of the tree with a frame there counts as reading it (the graded module
that calls a helper that reads), and the innermost is named. The course's own graded test
files (test_*.py, conftest.py) in the tree are not graded code: a graded test may load a
shipped solution as a given program.

The hook costs one comparison for every other audit event, and a `stat` for each `open`. It
keeps no state of its own that graded code could set to mute it (a re-entry flag): recording a
read opens no file, so the hook is never entered again from within itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .context import active

_installed = False


class SolutionReads:
    """The shipped solution files one run's graded tree opened, by the tree's files that read them."""

    def __init__(self, tree_root: Path, solutions_dir: Path):
        self.tree_prefixes = _prefixes(Path(tree_root))
        self.solutions_dir = Path(solutions_dir)
        self.solution_prefixes = _prefixes(self.solutions_dir)
        self.inodes = _inodes(self.solutions_dir)
        # reading file -> (order, depth, solution file, line) of its first read; every file of the tree
        # with a frame on the stack reads (a helper module reading for the graded one), the innermost
        # (depth 0) most directly
        self.by_reader: dict[str, tuple[int, int, Path, int]] = {}
        self._graded_files: dict[str, str | None] = {}  # co_filename -> its resolved path, if graded code

    def read_by(self, files) -> tuple[Path, Path, int] | None:
        """(solution file, reading file, its line) for the first read made by one of `files`
        (resolved paths, as text), or None."""
        reads = sorted((self.by_reader[f], f) for f in files if f in self.by_reader)
        if not reads:
            return None
        (_, _, solution, line), reader = reads[0]
        return solution, Path(reader), line

    def _opened(self, path) -> None:
        solution = self._solution_file(path)
        if solution is None:
            return
        frame, depth, order = sys._getframe(2), 0, len(self.by_reader)
        while frame is not None:
            reader = self._graded_file(frame.f_code.co_filename)
            if reader is not None:
                self.by_reader.setdefault(reader, (order, depth, solution, frame.f_lineno))
                depth += 1
            frame = frame.f_back

    def _solution_file(self, path) -> Path | None:
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:  # a file descriptor
            return None
        absolute = os.path.abspath(text)
        if absolute.startswith(self.solution_prefixes):
            return Path(absolute)
        try:
            stat = os.stat(text)
        except (OSError, ValueError):
            return None
        return self.inodes.get((stat.st_dev, stat.st_ino))

    def _graded_file(self, filename: str) -> str | None:
        if filename not in self._graded_files:
            resolved = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
            name = os.path.basename(resolved)
            graded = (resolved.startswith(self.tree_prefixes) and resolved.endswith(".py")
                      and not name.startswith("test_") and name != "conftest.py")
            self._graded_files[filename] = resolved if graded else None
        return self._graded_files[filename]


def watch(tree_root: Path, solutions_dir: Path) -> SolutionReads:
    """Record, from now on and for the run whose grading context is active, what the tree at
    `tree_root` opens of `solutions_dir`. The hook is installed once per process."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    return SolutionReads(tree_root, solutions_dir)


def _hook(event: str, args: tuple) -> None:
    if event != "open":
        return
    reads = active().solution_reads
    if reads is None or not args:
        return
    try:
        reads._opened(args[0])
    except Exception:  # an audit hook that raises would fail the open itself
        pass


def _prefixes(folder: Path) -> tuple[str, ...]:
    """The folder as text, as given and resolved, each ending in a separator."""
    forms = {os.path.abspath(folder), os.path.realpath(folder)}
    return tuple(form.rstrip(os.sep) + os.sep for form in forms)


def _inodes(folder: Path) -> dict[tuple[int, int], Path]:
    """(device, inode) of every file under the folder: the same file under any other name."""
    found = {}
    if folder.is_dir():
        for path in folder.rglob("*"):
            try:
                stat = path.stat()
            except OSError:
                continue
            if path.is_file():
                found[(stat.st_dev, stat.st_ino)] = path
    return found
