"""Evidence for the instructor: a tree's files that reach into the course's package, or into the
process around them, where the chapter's own stubs and solutions do not.

The trusted check judges a tree's values outside its process, so a tree that answers with the
course's own oracles (`pytest_tpucourse.references`) gives right values and is done: only its
source shows how. Every file of each tree (python_source.tree_files: no link followed, bounded;
not only .py: a notes.txt a module execs, a lib.zip's members; within the class's budget,
report_budget.py) is read as Python tokens for what the shipped files of its chapter
(exercises/chNN and solutions/chNN, test files aside) do not do themselves:

- the course's package named: a dotted name or import of `pytest_tpucourse...` that none of
  them names (chapter 14's timeline imports the course's semaphore simulator: that is not
  flagged, `pytest_tpucourse.references` is), or a string that names `tpucourse` (importlib,
  `__import__`);
- the process looked into: the call stack's frames (`sys._getframe`, `f_back`, `f_locals`, ...),
  the garbage collector's objects (`gc.get_objects`), the loaded modules (`sys.modules`).

A name a file builds at run time (`chr()`s, an encoded string, a codec it registers) is not found
here; a file Python cannot read as source is listed by the similarity report as not read. This
is evidence for a person to read beside the files, never a verdict; the gradebook does not use it.
"""

from __future__ import annotations

import functools
import io
import re
import token
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.course import EXERCISES, Course
from . import python_source, solution_prints
from .report_budget import Budget

PACKAGE = "pytest_tpucourse"
# A name -> what using it looks into.
LOOKS_INTO = {
    "_getframe": "the call stack", "_current_frames": "the call stack", "currentframe": "the call stack",
    "getouterframes": "the call stack", "getinnerframes": "the call stack", "extract_stack": "the call stack",
    "walk_stack": "the call stack", "f_back": "the call stack", "f_locals": "the call stack",
    "f_globals": "the call stack", "tb_frame": "the call stack",
    "get_objects": "the garbage collector", "get_referrers": "the garbage collector",
    "get_referents": "the garbage collector",
    "sys.modules": "the loaded modules",
}
_CHAPTER = re.compile(r"ch\d\d")
ZIP_MEMBERS = 200  # members of one zip archive read at most


@dataclass
class Uses:
    """What one file names: course names and what it looks into, each with the lines it is on."""

    course: dict[str, list[int]] = field(default_factory=dict)  # a dotted pytest_tpucourse name -> lines
    strings: list[int] = field(default_factory=list)  # lines of strings naming tpucourse
    looks: dict[str, list[int]] = field(default_factory=dict)  # a LOOKS_INTO name -> lines

    def add(self, table: dict, name: str, line: int) -> None:
        lines = table.setdefault(name, [])
        if line not in lines:
            lines.append(line)


def uses(source: bytes) -> Uses:
    """What the file names (python_source.UnreadableSource where Python cannot read it)."""
    found = Uses()
    toks = [t for t in python_source.tokens(source)
            if t.type not in (token.COMMENT, token.NL, token.ENCODING, token.INDENT, token.DEDENT)]
    for i, tok in enumerate(toks):
        if tok.type == token.NAME and tok.string == PACKAGE:
            for name in _names_at(toks, i):
                found.add(found.course, name, tok.start[0])
        elif tok.type == token.NAME and tok.string in LOOKS_INTO:
            found.add(found.looks, tok.string, tok.start[0])
        elif (tok.type == token.NAME and tok.string == "modules" and i >= 2 and toks[i - 1].string == "."
              and toks[i - 2].string.endswith("sys")):
            found.add(found.looks, "sys.modules", tok.start[0])
        elif _is_string(tok) and "tpucourse" in tok.string and not _stands_alone(toks, i):
            if tok.start[0] not in found.strings:
                found.strings.append(tok.start[0])
    return found


def _is_string(tok) -> bool:
    return tok.type == token.STRING or tok.type == getattr(token, "FSTRING_MIDDLE", -1)


def _stands_alone(toks, i: int) -> bool:
    """A string that is a statement of its own (a docstring): it names, it runs nothing."""
    before = toks[i - 1].type if i else token.NEWLINE
    after = toks[i + 1].type if i + 1 < len(toks) else token.NEWLINE
    return before == token.NEWLINE and after in (token.NEWLINE, token.ENDMARKER)


def _names_at(toks, i: int) -> list[str]:
    """The dotted names a `pytest_tpucourse` token at `i` starts: `a.b.c`, or for
    `from a.b import c, d as e` each of `a.b.c` and `a.b.d`."""
    parts, j = [toks[i].string], i + 1
    while j + 1 < len(toks) and toks[j].string == "." and toks[j + 1].type == token.NAME:
        parts.append(toks[j + 1].string)
        j += 2
    dotted = ".".join(parts)
    if not (i and toks[i - 1].string == "from" and j < len(toks) and toks[j].string == "import"):
        return [dotted]
    names, j, alias = [], j + 1, False
    while j < len(toks) and toks[j].type not in (token.NEWLINE, token.ENDMARKER) and toks[j].string != ";":
        if toks[j].type == token.NAME:
            if toks[j].string == "as":
                alias = True
            elif not alias:
                names.append(f"{dotted}.{toks[j].string}")
            else:
                alias = False
        j += 1
    return names or [dotted]


def _expected(name: str, shipped: set[str]) -> bool:
    """Whether the chapter's shipped files name `name`, or a module of the package it is in (the bare
    package aside: naming one of its modules does not make every other one expected)."""
    parts = name.split(".")
    return name in shipped or any(".".join(parts[:n]) in shipped for n in range(2, len(parts)))


@functools.lru_cache(maxsize=64)
def shipped_uses(course_root: Path, chapter: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the course names, what they look into) of the chapter's shipped files: its stubs and
    solutions, test files and conftests aside."""
    names, looks = set(), set()
    for tree in ("exercises", "solutions"):
        for path in sorted((Path(course_root) / tree / chapter).glob("*.py")):
            if path.name.startswith("test_") or path.name == "conftest.py":
                continue
            source = python_source.read(path)
            try:
                found = uses(source) if source is not None else Uses()
            except python_source.UnreadableSource:
                continue
            names |= set(found.course)
            looks |= set(found.looks)
    return frozenset(names), frozenset(looks)


def file_findings(source: bytes, shipped: tuple[frozenset[str], frozenset[str]]) -> list[str]:
    """What the file does beyond what its chapter's shipped files do, in words ([]: nothing)."""
    names, looks = shipped
    found = uses(source)
    said = []
    course = {n: lines for n, lines in found.course.items() if not _expected(n, names)}
    if course:
        said.append(f"names {', '.join(sorted(course))} ({_lines(course)}), which the chapter's stubs and "
                    f"solutions do not")
    if found.strings:
        said.append(f"names the course's package in a string ({_lines({'': found.strings})})")
    by_what: dict[str, dict[str, list[int]]] = {}
    for name, lines in found.looks.items():
        if name not in looks:
            by_what.setdefault(LOOKS_INTO[name], {})[name] = lines
    for what, names_used in sorted(by_what.items()):
        said.append(f"looks into {what}: {', '.join(sorted(names_used))} ({_lines(names_used)})")
    return said


def _lines(table: dict[str, list[int]]) -> str:
    lines = sorted({line for found in table.values() for line in found})
    shown = ", ".join(map(str, lines[:8])) + (", ..." if len(lines) > 8 else "")
    return f"line {shown}" if len(lines) == 1 else f"lines {shown}"


def findings(course: Course, trees: list[str], budget: Budget | None = None) -> list[dict]:
    """[{"file": the file as the gradebook names its tree, "how": [...]}] for every file of the trees
    that reaches further than its chapter's shipped files (scan's first list)."""
    return scan(course, trees, budget)[0]


def scan(course: Course, trees: list[str], budget: Budget | None = None) -> tuple[list[dict], list[dict]]:
    """(the files that reach further than their chapter's shipped files, [{"file", "how": [...]}];
    the files that hold a shipped solution, [{"file", "solution", "how"}]), in order of tree and
    file. Every file is read, not only .py: a notes.txt a module execs, the .py members of a lib.zip
    it imports from (`lib.zip/mod.py`); a copy of the course's own file at the same place (its
    README.md) is not. Within `budget` (report_budget.py), which lists what it skipped."""
    budget = budget if budget is not None else Budget()
    prints = solution_prints.of(course.root)
    reach, copies = [], []
    for tree in sorted(trees):
        for path in python_source.tree_files(Path(tree)):
            relative = path.relative_to(tree)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if not budget.may_read(f"reach:{tree}", str(path), size):
                continue
            chapter = relative.parts[0] if len(relative.parts) > 1 and _CHAPTER.fullmatch(relative.parts[0]) else ""
            shipped = shipped_uses(course.root, chapter) if chapter else (frozenset(), frozenset())
            for shown, source in _sources(path, relative, course.root, budget):
                copied = prints.copy_of(source)
                if copied is not None:
                    copies.append({"file": shown, "solution": copied[0], "how": copied[1]})
                try:
                    how = file_findings(source, shipped)
                except python_source.UnreadableSource:
                    continue  # not Python anyone can import as it is (the similarity report lists graded ones)
                if how:
                    reach.append({"file": shown, "how": how})
    return reach, copies


def _sources(path: Path, relative: Path, course_root: Path, budget: Budget):
    """(how the report names it, bytes) of what in the file could run as Python: a .py file, another
    file unless it is the course's own at that place, the .py members of a zip archive."""
    source = python_source.read(path)
    if source is None:
        return
    if zipfile.is_zipfile(io.BytesIO(source)):
        yield from _zip_members(path, source, budget)
        return
    if path.suffix != ".py" and python_source.read(Path(course_root) / EXERCISES / relative) == source:
        return  # the course's own README.md, as shipped
    yield str(path), source


def _zip_members(path: Path, data: bytes, budget: Budget):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith((".py", ".txt")) and not m.is_dir()]
            for member in members[:ZIP_MEMBERS]:
                shown = f"{path}/{member.filename}"
                if member.file_size > budget.file_bytes:
                    budget.skip(shown, f"{member.file_size} bytes, over the {budget.file_bytes} a file is read at most")
                    continue
                with archive.open(member) as handle:
                    yield shown, handle.read(budget.file_bytes + 1)[:budget.file_bytes]
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, RuntimeError) as error:
        budget.skip(str(path), f"a zip archive that could not be read ({type(error).__name__})")
