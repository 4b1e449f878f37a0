"""Recognising the course's shipped solutions in what a learner's tree runs: by where its code
comes from, never by what the code looks like.

The chapter READMEs teach one way to write each kernel (`acc_ref`, `_init`, `_flush`; a
softmax of `x`), so a learner's own code often compiles to the solutions' bytecode, names and
constants, and a copy renamed does not. Resemblance tells nothing; so nothing here compares a
learner's code with the solutions'. What is recognised is the solutions' own files, or their
compilation, arriving in what the graded tree runs:

- a link: the graded module is a symlink, or resolves into solutions/;
- a copy: a file the graded tree runs (the graded module as imported, another module of the
  tree, the file any function it holds comes from) has exactly the bytes of a shipped
  solution file, in the checkout or at git HEAD (a hardlink; solutions/ copied or moved into
  the tree). A file shorter than MIN_FILE_BYTES can be anybody's and is not compared;
- loaded: a module, or a function's code, whose file is under solutions/ (an import,
  importlib by path, runpy, `public_kernels.course_solution`);
- executed: a function's code that claims a file of the graded tree but is not the compilation
  of that file's source (as imported, or as it is now) at its line, whatever it was compiled
  from: a solution read in another process (`git show`, `cat`) and executed under the learner's
  file name, one line lower or renamed, is refused as not the file's own code (`not_own`), and
  named as the solution's where its code is a solution's, its first line and names aside. Code
  that claims no file, or a file outside the tree (a library's), is refused where it is a
  solution's compilation, first line and function names aside, and is not its claimed file's own;
- read: a file under solutions/ opened by the graded tree's code during its import or calls
  (solution_reads.py).

What the graded function and its module hold is followed (containers, closures, wrappers,
classes, the tree's other modules) to find these. What none of them can see (a solution
copied by hand, or rewritten) is said in docs/earned.md.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

MIN_FILE_BYTES = 200  # a file this short can be anybody's: its bytes are not compared
_VISITS = 20_000  # objects followed at most from one graded function
_CONTAINER_ITEMS = 1_000  # items of one list, tuple, set or dict followed at most

_checkout_files: dict = {}  # solutions folder -> (signature, {size: [(path, sha256)]})
_head_blobs: dict = {}  # course root -> {size: [(path, git blob id)]}
_compiled_keys: dict = {}  # (file, sha256 of its source) -> the keys of every code object compiled from it
_solution_code: dict = {}  # solutions folder -> (signature, {code key: (path, qualname)})
_outside_files: set = set()  # file names known to be neither the graded tree's nor the solutions'


def forget_commits() -> None:
    """Read git HEAD's solution files again in the next run (a warm process serves many runs,
    and HEAD may move between them)."""
    _head_blobs.clear()


@dataclass(frozen=True)
class Provenance:
    """Where a graded function's code comes from, as far as it concerns the shipped solutions."""

    shipped: str | None  # how it uses the shipped solutions, in words ("loads solutions/ch11/x.py"), or None
    tree_files: frozenset[str]  # the graded tree's files it runs (resolved paths), whose reads count
    # Code that claims a file of the tree and is not that file's compilation, in words, or None: compiled
    # from other text under the file's name (where that text is a solution's, `shipped` says so instead)
    not_own: str | None = None


def shipped_solution_in(function, module_path: Path, imported_source: bytes | None, tree_root: Path,
                        solutions_dir: Path, reads=None, imported_sources: dict | None = None) -> Provenance:
    """How the graded function or its module uses the shipped solutions, and the tree's files it
    runs. imported_source: the bytes the module was imported from (None: read it now); reads: the
    run's solution_reads.SolutionReads, or None; imported_sources: {resolved path: bytes} of the
    tree's other modules as this run imported them."""
    module_path, solutions_dir, tree_root = Path(module_path), Path(solutions_dir), Path(tree_root)
    resolved = str(module_path.resolve())
    if module_path.is_symlink() or _inside(module_path, solutions_dir):
        return Provenance(f"is a link to {_shown(module_path.resolve(), solutions_dir)}", frozenset({resolved}))
    source = imported_source if imported_source is not None else _read(module_path)
    walk = _Walk(tree_root, solutions_dir, {**(imported_sources or {}), resolved: source})
    copied = walk.solutions.copy_of(source)
    if copied is not None:
        return Provenance(f"is a copy of {copied}", frozenset({resolved}))
    found = walk.find(function)
    files = frozenset(walk.tree_files | {resolved})
    if (found is None or isinstance(found, _NotOwn)) and reads is not None:  # a solution read says more
        found = read_verdict(reads, files, tree_root.parent, solutions_dir) or found
    if isinstance(found, _NotOwn):
        return Provenance(None, files, str(found))
    return Provenance(found, files)


def read_verdict(reads, files, course_root: Path, solutions_dir: Path) -> str | None:
    """A solution file read by one of the tree's `files`, in words, or None."""
    read = reads.read_by(files)
    if read is None:
        return None
    solution, reader, line = read
    return f"reads {_shown(solution, solutions_dir)} (at {_relative(reader, course_root)}:{line})"


def code_key(code: types.CodeType) -> tuple:
    """A code object as compiling its source gives it, line numbers included, file name left out."""
    consts = tuple(code_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_qualname, code.co_firstlineno, code.co_code, code.co_linetable, code.co_exceptiontable,
            code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
            code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, consts)


def content_key(code: types.CodeType) -> tuple:
    """A code object as its source's text gives it wherever that text stands and whatever its
    functions are called: code_key without the first line and the qualified names."""
    consts = tuple(content_key(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_code, code.co_linetable, code.co_exceptiontable, code.co_names, code.co_varnames,
            code.co_freevars, code.co_cellvars, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_flags, consts)


def _compiled_from(path: str, source: bytes | None) -> frozenset:
    """The keys of every code object compiling `source` (the file at `path`) gives: as Python
    imports it, and for a test file or conftest as pytest's assertion rewriting imports it."""
    if source is None:
        return frozenset()
    cache_key = (path, hashlib.sha256(source).hexdigest())
    if cache_key not in _compiled_keys:
        keys = set()
        for module_code in _compilations(path, source):
            keys |= {code_key(code) for code in _nested_codes(module_code)}
        _compiled_keys[cache_key] = frozenset(keys)
    return _compiled_keys[cache_key]


def _compilations(path: str, source: bytes):
    """The module code objects the file's source gives where Python, or pytest, imports it."""
    try:
        yield compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return
    name = os.path.basename(path)
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        try:
            import ast

            from _pytest.assertion.rewrite import rewrite_asserts

            tree = ast.parse(source, filename=path)
            rewrite_asserts(tree, source, path, None)
            yield compile(tree, path, "exec", dont_inherit=True)
        except Exception:  # pytest's internals moved: the plain compilation is still known
            return


def _nested_codes(code: types.CodeType):
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _nested_codes(const)


class _Solutions:
    """The shipped solution files as one walk sees them: listed and checked for changes once per
    walk, their contents and compilation cached for the process while they do not change."""

    def __init__(self, solutions_dir: Path, course_root: Path):
        self.dir = solutions_dir
        self.course_root = course_root

    @functools.cached_property
    def signature(self) -> tuple:
        """(path, mtime, size) of each solution file: what the caches are checked against."""
        stats = []
        for path in sorted(self.dir.glob("ch*/*.py")) if self.dir.is_dir() else []:
            try:
                stat = path.stat()
            except OSError:
                continue
            stats.append((path, stat.st_mtime_ns, stat.st_size))
        return tuple(stats)

    @functools.cached_property
    def by_size(self) -> dict:
        """{size: [(path, sha256)]} of the solution files in the checkout."""
        cached = _checkout_files.get(self.dir)
        if cached is None or cached[0] != self.signature:
            index: dict = {}
            for path, _, _ in self.signature:
                data = _read(path)
                if data is not None and len(data) >= MIN_FILE_BYTES:
                    index.setdefault(len(data), []).append((path, hashlib.sha256(data).hexdigest()))
            cached = _checkout_files[self.dir] = (self.signature, index)
        return cached[1]

    @property
    def committed_by_size(self) -> dict:
        """{size: [(path, blob id)]} of the solution files committed at git HEAD: a solutions/
        that was moved or deleted from the checkout is still known. Empty outside git."""
        if self.course_root not in _head_blobs:
            index: dict = {}
            try:
                listing = subprocess.run(
                    ["git", "-C", str(self.course_root), "ls-tree", "-r", "-l", "HEAD", "--", self.dir.name],
                    capture_output=True, text=True, timeout=10, check=True).stdout
            except (OSError, subprocess.SubprocessError):
                listing = ""
            for line in listing.splitlines():
                meta, _, name = line.partition("\t")
                parts = meta.split()
                if (len(parts) == 4 and parts[1] == "blob" and name.endswith(".py") and parts[3].isdigit()
                        and int(parts[3]) >= MIN_FILE_BYTES):
                    index.setdefault(int(parts[3]), []).append((self.course_root / name, parts[2]))
            _head_blobs[self.course_root] = index
        return _head_blobs[self.course_root]

    @functools.cached_property
    def code(self) -> dict:
        """{code key: (path, qualname)} of every function compiled from the shipped solutions, and
        {content key: (path, qualname)} of the same (content_key: its first line and names aside):
        what code that is not its own file's is identified by."""
        cached = _solution_code.get(self.dir)
        if cached is None or cached[0] != self.signature:
            index: dict = {}
            for path, _, _ in self.signature:
                try:
                    module_code = compile(_read(path) or b"", str(path), "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    continue
                for code in _nested_codes(module_code):
                    index.setdefault(code_key(code), (path, code.co_qualname))
                    index.setdefault(("content", content_key(code)), (path, code.co_qualname))
            cached = _solution_code[self.dir] = (self.signature, index)
        return cached[1]

    def copy_of(self, source: bytes | None) -> str | None:
        """"solutions/chNN/x.py" when `source` is a shipped solution file's bytes."""
        if source is None or len(source) < MIN_FILE_BYTES:
            return None
        for path, digest in self.by_size.get(len(source), ()):
            if hashlib.sha256(source).hexdigest() == digest:
                return _shown(path, self.dir)
        committed = self.committed_by_size.get(len(source), ())
        if committed:
            blob = hashlib.sha1(b"blob %d\0" % len(source) + source).hexdigest()
            for path, blob_id in committed:
                if blob == blob_id:
                    return f"{_relative(path, self.course_root)} (as committed)"
        return None

    def sizes(self) -> set[int]:
        return set(self.by_size) | set(self.committed_by_size)


class _NotOwn(str):
    """What the walk found: code that claims a file of the tree and is not that file's compilation."""


class _Walk:
    """Follows what a graded function holds, looking for code that comes from the solutions, or that
    claims a file of the tree without being that file's compilation."""

    def __init__(self, tree_root: Path, solutions_dir: Path, sources: dict):
        self.tree_root = tree_root
        self.solutions_dir = solutions_dir
        self.course_root = tree_root.parent
        self.solutions = _Solutions(solutions_dir, self.course_root)
        self.sources = sources  # resolved path -> the bytes it was imported from, where known
        self.tree_files: set[str] = set()
        self.seen: set[int] = set()
        self.pending: list = []
        self._where: dict[str, str] = {}  # a file name -> its kind (_kind)
        self._solutions_prefix = os.path.realpath(solutions_dir) + os.sep
        self._tree_prefix = os.path.realpath(tree_root) + os.sep
        self._files_checked: dict[str, str | None] = {}
        self._own_keys: dict[str, frozenset] = {}  # a tree file -> the keys of its own compilation
        self._sizes: set[int] | None = None  # the sizes of the solution files, checkout and HEAD

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
            if not isinstance(file, str):
                return None
            where = self._file(file)
            if where is None and self._kind(file) == "tree":
                self.pending.append(vars(value))
            return None if where is None else f"loads {where}"
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
            if isinstance(file, str) and self._kind(file) == "tree":
                self.pending.append(globals_)
            return None
        if isinstance(value, type):
            module = sys.modules.get(getattr(value, "__module__", ""))
            file = getattr(module, "__file__", None)
            if not isinstance(file, str) or self._kind(file) not in ("tree", "solutions"):
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
        file = code.co_filename
        where = self._file(file)
        if where is not None:
            return f"runs {code.co_qualname}() of {where}"
        kind, key = self._kind(file), code_key(code)
        if kind == "tree":
            if key in self._own(file):
                return None
            match = self.solutions.code.get(key) or self.solutions.code.get(("content", content_key(code)))
            if match is not None:
                return self._solutions_code(match)
            return _NotOwn(f"{code.co_qualname}() claims {_relative(Path(file), self.course_root)}, line "
                           f"{code.co_firstlineno}, but that file does not compile to it: code compiled from "
                           f"other text under the file's name")
        if kind in ("none", "outside"):
            match = self.solutions.code.get(key)
            if match is None:
                match = self.solutions.code.get(("content", content_key(code)))
                if match is not None and kind == "outside" and key in _compiled_from(file, _read(Path(file))):
                    match = None  # a library's own code, as its file compiles (it reads like a solution's)
            if match is not None:
                return self._solutions_code(match)
        return None

    def _own(self, file: str) -> frozenset:
        """The keys of the code a file of the tree compiles to: as this run imported it, or as it is now
        (a file saved between its reading and its import)."""
        if file not in self._own_keys:
            own = _compiled_from(file, self._source(file))
            now = _read(Path(file))
            if now is not None and now != self._source(file):
                own = own | _compiled_from(file, now)
            self._own_keys[file] = own
        return self._own_keys[file]

    def _solutions_code(self, match) -> str:
        path, qualname = match
        return f"runs the code of {qualname}() in {_shown(path, self.solutions_dir)}"

    def _file(self, file: str) -> str | None:
        """The file, shown, where it is under solutions/ or a copy of a solution file; else None."""
        if file not in self._files_checked:
            kind, verdict = self._kind(file), None
            if kind == "solutions":
                verdict = _shown(Path(file), self.solutions_dir)
            elif kind in ("tree", "outside"):
                resolved = os.path.realpath(file)
                if kind == "tree":
                    self.tree_files.add(resolved)
                copied = self.solutions.copy_of(self._source(file))
                if copied is not None:
                    verdict = f"{_relative(Path(file), self.course_root)}, a copy of {copied}"
            self._files_checked[file] = verdict
        return self._files_checked[file]

    def _kind(self, file: str) -> str:
        """"solutions", "tree", "outside" (another file: a library's) or "none" (no such file)."""
        if file in _outside_files:
            return "outside"
        if file not in self._where:
            real = os.path.realpath(file)
            if real.startswith(self._solutions_prefix):
                kind = "solutions"
            elif not os.path.isfile(real):
                kind = "none"
            elif real.startswith(self._tree_prefix):
                kind = "tree"
            else:
                kind = "outside"
                _outside_files.add(file)
            self._where[file] = kind
        return self._where[file]

    def _source(self, file: str) -> bytes | None:
        resolved = os.path.realpath(file)
        if resolved not in self.sources:
            kind = self._kind(file)
            if self._sizes is None:
                self._sizes = self.solutions.sizes()
            # A file outside the tree is read only where its size is a solution file's.
            wanted = kind == "tree" or (kind == "outside" and _size(file) in self._sizes)
            self.sources[resolved] = _read(Path(file)) if wanted else None
        return self.sources[resolved]


def _size(file: str) -> int | None:
    try:
        return os.stat(file).st_size
    except OSError:
        return None


def _read(path: Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except (ValueError, OSError):
        return False
    return True


def _relative(path: Path, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def _shown(path: Path, solutions_dir: Path) -> str:
    """solutions/chNN/x.py, as the learner would type it."""
    try:
        inside = Path(path).resolve().relative_to(solutions_dir.resolve())
    except ValueError:
        return str(path)
    return f"{solutions_dir.name}/{inside.as_posix()}"
