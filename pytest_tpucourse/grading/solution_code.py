"""Recognising the course's shipped solutions in the code a learner's tree runs.

A learner's exercises are graded on their own code. The shipped solutions can arrive in many
ways: imported or loaded by path (a module object, or only its function kept in a list), their
source executed into the learner's module (`exec(compile(src, __file__, "exec"))`, which names
the learner's file), a hardlink, a symlink or a verbatim copy of the file. Each is recognised by
what runs: the objects the graded function and its module hold (followed into containers,
closures, wrappers and the tree's other modules) are compared with solutions/, by the file their
code comes from and by the code itself (bytecode, names and constants, not the file name or
line numbers), and the module's bytes with the solution file's.

Code too short to be anybody's in particular (`return x * 2`) is not compared: a learner
writes it the same way. What this cannot see (a solution rewritten, or read in pieces) is
said in docs/earned.md.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import types
from pathlib import Path

MIN_CODE_BYTES = 64  # bytecode shorter than this is compared by origin only, never by content
MIN_FILE_BYTES = 200  # a module file this short is compared by origin only
_VISITS = 20_000  # objects followed at most from one graded function
_CONTAINER_ITEMS = 1_000  # items of one list, tuple, set or dict followed at most

_solutions: dict = {}  # chapter folder -> (signature, fingerprints, {sha256: path})


def shipped_solution_in(function, module_path: Path, module_digest: str | None, tree_root: Path,
                        solutions_dir: Path) -> str | None:
    """How the graded function or its module uses the shipped solutions of its chapter, in
    words ("loads solutions/ch11/x.py", ...), or None."""
    module_path, solutions_dir = Path(module_path), Path(solutions_dir)
    if module_path.is_symlink() or _inside(module_path, solutions_dir):
        return f"is a link to {_shown(module_path.resolve(), solutions_dir)}"
    fingerprints, files = _solution_index(solutions_dir / module_path.parent.name)
    if module_digest is not None and module_digest in files:
        return f"is a copy of {_shown(files[module_digest], solutions_dir)}"
    return _Walk(tree_root, solutions_dir, fingerprints).find(function)


def code_fingerprint(code: types.CodeType) -> tuple:
    """What a code object does, without where it was compiled from."""
    consts = tuple(code_fingerprint(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
            code.co_argcount, code.co_kwonlyargcount, consts)


def _solution_index(chapter_dir: Path):
    """The fingerprints of every function of the chapter's solutions ({fingerprint: (path, name)})
    and the sha256 of each of their files, read again when a file changes."""
    paths = sorted(chapter_dir.glob("*.py")) if chapter_dir.is_dir() else []
    signature = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    cached = _solutions.get(chapter_dir)
    if cached is not None and cached[0] == signature:
        return cached[1], cached[2]
    fingerprints, files = {}, {}
    for path in paths:
        source = path.read_bytes()
        if len(source) >= MIN_FILE_BYTES:
            files[hashlib.sha256(source).hexdigest()] = path
        try:
            module_code = compile(source, str(path), "exec")
        except (SyntaxError, ValueError):
            continue
        given = _shipped_stub_fingerprints(chapter_dir, path.name)
        for code in _nested_codes(module_code):
            if len(code.co_code) >= MIN_CODE_BYTES and code_fingerprint(code) not in given:
                fingerprints.setdefault(code_fingerprint(code), (path, code.co_qualname))
    _solutions[chapter_dir] = (signature, fingerprints, files)
    return fingerprints, files


def _shipped_stub_fingerprints(chapter_dir: Path, name: str) -> set:
    """The code the stub itself ships written (a chapter's given functions, the same in the
    solution): as committed, since the learner's copy may be anything. Empty outside git."""
    root = chapter_dir.parent.parent
    try:
        source = subprocess.run(["git", "-C", str(root), "show", f"HEAD:exercises/{chapter_dir.name}/{name}"],
                                capture_output=True, timeout=10, check=True).stdout
        module_code = compile(source, name, "exec")
    except (OSError, subprocess.SubprocessError, SyntaxError, ValueError):
        return set()
    return {code_fingerprint(code) for code in _nested_codes(module_code)}


def _nested_codes(code: types.CodeType):
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _nested_codes(const)


class _Walk:
    """Follows what a graded function holds, looking for the solutions' code."""

    def __init__(self, tree_root: Path, solutions_dir: Path, fingerprints: dict):
        self.tree_root = Path(tree_root)
        self.solutions_dir = Path(solutions_dir)
        self.fingerprints = fingerprints
        self.seen: set[int] = set()
        self.pending: list = []

    def find(self, function) -> str | None:
        self.pending.append(function)
        globals_ = getattr(function, "__globals__", None)
        if isinstance(globals_, dict):
            self.pending.append(globals_)
        while self.pending and len(self.seen) < _VISITS:
            found = self._visit(self.pending.pop())
            if found is not None:
                return found
        return None

    def _visit(self, value) -> str | None:
        if id(value) in self.seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
            return None
        self.seen.add(id(value))
        if isinstance(value, types.ModuleType):
            file = getattr(value, "__file__", None)
            if file and _inside(Path(file), self.solutions_dir):
                return f"loads {_shown(Path(file), self.solutions_dir)}"
            if file and _inside(Path(file), self.tree_root):
                self.pending.append(vars(value))
            return None
        if isinstance(value, dict):
            self.pending.extend(list(value.values())[:_CONTAINER_ITEMS])
            return None
        if isinstance(value, (list, tuple, set, frozenset)):
            self.pending.extend(list(value)[:_CONTAINER_ITEMS])
            return None
        code = getattr(value, "__code__", None)
        if isinstance(code, types.CodeType):
            found = self._code(code)
            if found is not None:
                return found
            for cell in getattr(value, "__closure__", None) or ():
                try:
                    self.pending.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            globals_ = getattr(value, "__globals__", None)
            file = globals_.get("__file__") if isinstance(globals_, dict) else None
            if file and _inside(Path(file), self.tree_root):
                self.pending.append(globals_)
            return None
        if isinstance(value, type):
            module = sys.modules.get(getattr(value, "__module__", ""))
            file = getattr(module, "__file__", None)
            if not file or not (_inside(Path(file), self.tree_root) or _inside(Path(file), self.solutions_dir)):
                return None
            self.pending.extend(v for v in vars(value).values() if callable(v) or isinstance(v, (staticmethod,
                                                                                                  classmethod)))
            return None
        for name in ("__wrapped__", "fun", "func", "__func__", "fwd", "bwd", "_fun"):
            inner = getattr(value, name, None) if not isinstance(value, types.BuiltinFunctionType) else None
            if inner is not None and callable(inner):
                self.pending.append(inner)
        if callable(value) and not isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType)):
            call = getattr(type(value), "__call__", None)
            if isinstance(getattr(call, "__code__", None), types.CodeType):
                self.pending.append(call)
        return None

    def _code(self, code: types.CodeType) -> str | None:
        if _inside(Path(code.co_filename), self.solutions_dir):
            return f"runs {code.co_qualname}() of {_shown(Path(code.co_filename), self.solutions_dir)}"
        for inner in (code, *_nested_codes(code)):
            if len(inner.co_code) >= MIN_CODE_BYTES:
                match = self.fingerprints.get(code_fingerprint(inner))
                if match is not None:
                    path, name = match
                    return f"runs the code of {name}() in {_shown(path, self.solutions_dir)}"
        return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except (ValueError, OSError):
        return False
    return True


def _shown(path: Path, solutions_dir: Path) -> str:
    """solutions/chNN/x.py, as the learner would type it."""
    try:
        inside = Path(path).resolve().relative_to(solutions_dir.resolve())
    except ValueError:
        return str(path)
    return f"{solutions_dir.name}/{inside.as_posix()}"
