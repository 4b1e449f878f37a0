"""Which files under solutions/ the learner's tree opened while it was imported and called.

A learner's module that reads a shipped solution (to exec it, to take it apart, to copy it
into itself) does so through `open`, which Python reports to audit hooks (PEP 578:
`open()`, `io.open_code` under import and runpy, `os.open`). One hook per process
(`sys.addaudithook` cannot be undone) records, while a run grades the learner's
exercises/, each opening of a file that is a shipped solution's (by path under solutions/,
or by inode: a hardlink or a symlink elsewhere) made with a frame of the graded tree on the
stack. The frame named is the innermost one of the tree: the module whose code did the
reading. The course's own graded test files (test_*.py, conftest.py) in the tree are not
graded code: a graded test may load a shipped solution as a given program.

The hook costs one comparison for every other audit event, and a `stat` for each `open`.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from .context import active

_installed = False
_inside_hook = threading.local()


class SolutionReads:
    """The shipped solution files one run's graded tree opened: {reader file: (solution, line)}."""

    def __init__(self, tree_root: Path, solutions_dir: Path):
        self.tree_prefixes = _prefixes(Path(tree_root))
        self.solutions_dir = Path(solutions_dir)
        self.solution_prefixes = _prefixes(self.solutions_dir)
        self.inodes = _inodes(self.solutions_dir)
        self.by_reader: dict[str, tuple[Path, int]] = {}  # reading file -> (solution file, line): its first read
        self._graded_files: dict[str, str | None] = {}  # co_filename -> its resolved path, if graded code

    def read_by(self, files) -> tuple[Path, Path, int] | None:
        """(solution file, reading file, its line) for a read made by one of `files` (resolved
        paths, as text), or None."""
        return next(((self.by_reader[f][0], Path(f), self.by_reader[f][1]) for f in files if f in self.by_reader),
                    None)

    def _opened(self, path) -> None:
        solution = self._solution_file(path)
        if solution is None:
            return
        frame = sys._getframe(2)
        while frame is not None:
            reader = self._graded_file(frame.f_code.co_filename)
            if reader is not None:
                self.by_reader.setdefault(reader, (solution, frame.f_lineno))
                return
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
    if reads is None or getattr(_inside_hook, "busy", False) or not args:
        return
    _inside_hook.busy = True
    try:
        reads._opened(args[0])
    except Exception:  # an audit hook that raises would fail the open itself
        pass
    finally:
        _inside_hook.busy = False


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
