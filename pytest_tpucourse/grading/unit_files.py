"""The files of the graded tree a graded module's import and its functions' calls run.

A kernel is all the code it runs: the graded module, the helper modules it imports (`from
._mine import softmax`), a `notes.txt` it execs, a `lib.zip` it imports from. Done entries,
confirmations and the gates' check that a kernel is confirmed hold the sha256 of each of these
files (the exercise's *unit*), so that a helper changed afterwards voids them exactly as an
edit of the graded file does.

The files are found as the run imports and calls the module, by an audit hook (PEP 578, one per
process: `sys.addaudithook` cannot be undone) that notes, while a recording is open, every file
of the tree that is opened to be read (`open`, `io.open_code` under import and zipimport,
`os.open`; a log it only writes is not code it runs), compiled under its own name, or whose code object is executed (`exec`: a module imported from
its cached bytecode opens only the .pyc, but executes code claiming its source). The tree's
modules the graded module's namespace refers to are added too: a helper another graded module
imported first is not imported again.

This runs in the process of the code it watches, which can hide from it: the trusted check that
confirms a unit judges it from outside that process (classroom/isolated.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
import types
from pathlib import Path

MAX_FILES = 500  # files of one unit, at most: a tree that opens more is cut there
_installed = False
_open: list["Recording"] = []  # the recordings open now (a graded call inside a graded import nests)
_apart = threading.local()  # .recording: the one recording that alone sees this thread's files


class Recording:
    """The tree's files seen while it is open (absolute paths, as text)."""

    def __init__(self, tree_root: Path):
        root = Path(tree_root)
        forms = {os.path.abspath(root), os.path.realpath(root)}
        self.prefixes = tuple(form.rstrip(os.sep) + os.sep for form in forms)
        self.files: set[str] = set()

    def saw(self, path) -> None:
        if isinstance(path, int) or path is None or len(self.files) >= MAX_FILES:
            return
        try:
            text = os.path.abspath(os.fsdecode(os.fspath(path)))
        except (TypeError, ValueError):
            return
        if text.startswith(self.prefixes) and f"{os.sep}__pycache__{os.sep}" not in text:
            self.files.add(text)


@contextlib.contextmanager
def recording(tree_root: Path):
    """Note the files of the tree at `tree_root` opened or executed within the block."""
    _install()
    seen = Recording(tree_root)
    _open.append(seen)
    try:
        yield seen
    finally:
        _open.remove(seen)


@contextlib.contextmanager
def recording_apart(tree_root: Path):
    """Note the files of the tree this thread opens or executes within the block, in this recording
    alone: work done ahead, on a thread of its own, for a call the run makes later (ahead.py), which
    the recordings open meanwhile must not count. The call that uses the work counts them
    (`seen_elsewhere`)."""
    _install()
    seen = Recording(tree_root)
    _apart.recording = seen
    try:
        yield seen
    finally:
        _apart.recording = None


def seen_elsewhere(files) -> None:
    """Count these files (a recording_apart's) in every recording open now."""
    for seen in list(_open):
        for path in files:
            seen.saw(path)


def _install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def _hook(event: str, args: tuple) -> None:
    apart = getattr(_apart, "recording", None)
    if not _open and apart is None:
        return
    try:
        if event == "open":
            if _writes_only(args):
                return  # a log or output it writes is not code it runs
            path = args[0]
        elif event == "exec":
            path = getattr(args[0], "co_filename", None)
        elif event == "compile":
            path = args[1] if len(args) > 1 and isinstance(args[1], (str, bytes)) else None
        else:
            return
        for seen in [apart] if apart is not None else list(_open):
            seen.saw(path)
    except Exception:  # an audit hook that raises would fail the open itself
        pass


def _writes_only(args: tuple) -> bool:
    """Whether an `open` event's (path, mode, flags) opens the file for writing alone."""
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str):
        return "+" not in mode and any(c in mode for c in "wax")
    return isinstance(flags, int) and flags & os.O_ACCMODE == os.O_WRONLY


def referenced_files(module: types.ModuleType, tree_root: Path) -> set[str]:
    """The files of the tree's modules that `module`'s namespace refers to: modules it imported,
    and the modules its functions and classes come from."""
    seen = Recording(tree_root)
    for value in list(vars(module).values()):
        try:  # a learner's object may answer getattr with anything, or raise
            if isinstance(value, types.ModuleType):
                seen.saw(getattr(value, "__file__", None))
                continue
            name = getattr(value, "__module__", None)
            owner = sys.modules.get(name) if isinstance(name, str) else None
            if owner is not None and owner is not module:
                seen.saw(getattr(owner, "__file__", None))
        except Exception:
            continue
    return seen.files


def digests(files, sources: dict | None = None) -> dict[str, str]:
    """{path: sha256} of these files: of the bytes in `sources` where it holds them (what the run
    imported), else as they are now; a file that cannot be read is left out."""
    sources = sources or {}
    found = {}
    for path in sorted(files)[:MAX_FILES]:
        data = sources.get(path)
        if data is None:
            try:
                data = Path(path).read_bytes()
            except OSError:
                continue
        found[path] = hashlib.sha256(data).hexdigest()
    return found


def relative(unit: dict[str, str], root: Path) -> dict[str, str]:
    """The unit with its paths relative to `root` (posix), those outside it left out."""
    found = {}
    for path, digest in unit.items():
        try:
            found[Path(path).relative_to(root).as_posix()] = digest
        except ValueError:
            continue
    return dict(sorted(found.items()))
