"""A new chapter in every place the course reads it: the scaffold behind `tpucourse new-chapter`.

`plan` reads the checkout (course.toml, and the gate table in its own package source) and
decides the chapter's id, stage and gate; `places` computes every file and entry it needs;
`write` checks them all, then writes them. Nothing is written when any place cannot be: an
existing folder, a gate table or course.toml that disagree, a file not shaped as expected.

What it writes (templates.py has the text):
  course.toml                    the chapter's entry and one per exercise (hints: TODO)
  exercises/chNN/                README.md with docs/authoring.md section 3's sections, and per
                                 exercise the stub and its graded test file test_<name>.py
  solutions/chNN/                per exercise the solution: a placeholder Pallas kernel that passes
  tests/mutants/chNN.toml        per exercise a mutant its graded tests catch
  with a gate: pytest_tpucourse/gates/criteria.py (the gate table's entry), exercises/chNN/
  test_gateNN.py, docs/records-schema.json's gate maximum, docs/gates.md's section
  README.md's course table, docs/facts.md's section (where the checkout has them)
What only a person writes is in `PERSON_WRITES`.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.course import COURSE_FILE, EXERCISES, SOLUTIONS, load_course, module_in_tree
from . import templates
from .templates import NewChapter

GATE_TABLE = "pytest_tpucourse/gates/criteria.py"
RECORDS_SCHEMA = "docs/records-schema.json"
GATES_DOC = "docs/gates.md"
FACTS_DOC = "docs/facts.md"
COURSE_README = "README.md"
EXERCISE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED = frozenset({"jax", "pl", "pltpu", "x", "conftest", "references", "checks", "tpu", "tst"})
_GATES_DOC_BEFORE = "### The numbers, and why"  # the new gate's section goes just above it
_COURSE_ROW = re.compile(r"^\| ch\d\d \|.*\|\n", re.M)

PERSON_WRITES = (
    "course.toml: the chapter's summary line, each exercise's summary and its hints, nudge to answer",
    "exercises/chNN/README.md: every TODO(author), the teaching above all; the mistakes table from the "
    "mutants' runs",
    "the op itself: each stub's contract, the solution's kernel, the graded tests' cases and checks "
    "(docs/authoring.md sections 4-6)",
    "tests/mutants/chNN.toml: a mutant per mistake the README names, correct variants as [[equivalents]]",
    "docs/facts.md: a row per claim the README makes about the toolchain, read off by tests/facts/test_chNN.py",
    "a gate: its criteria and slots in the gate table, their tests in test_gateNN.py, the criteria "
    "in docs/gates.md",
    "numbers that come from a run: the suite's time in docs/speed.md (python bench/suite_speed.py "
    "--chapter chNN), the catch rate in docs/checking.md, bench/README.md (tpucourse bench)",
    "prose that counts the chapters or the gates in words: README.md ('Fifteen chapters'), docs/gates.md "
    "('The six gates')",
)


class ScaffoldError(Exception):
    """The chapter cannot be written as asked: nothing was written."""


@dataclass(frozen=True)
class Place:
    """One file the scaffold writes: its path from the course root, its new text, and what changes."""

    path: str
    text: str
    what: str
    created: bool  # a new file (else an existing one edited)


def plan(root: Path, title: str, exercises, *, gate: bool = False, summary: str | None = None) -> NewChapter:
    """The next chapter of the checkout at `root`: its id, and the next stage and gate when it has one."""
    course = load_course(root)
    title = " ".join(title.split())
    if not title:
        raise ScaffoldError("a chapter needs a title")
    exercises = tuple(exercises)
    if not exercises:
        raise ScaffoldError("a chapter needs at least one exercise (--exercise NAME)")
    for name in exercises:
        if not EXERCISE_NAME.match(name) or keyword.iskeyword(name) or name in RESERVED or name.startswith("test"):
            raise ScaffoldError(f"exercise name {name!r}: a module and function name, lower case, letters, digits "
                                f"and _, not a keyword, not test_*, not one of {', '.join(sorted(RESERVED))}")
    if len(set(exercises)) != len(exercises):
        raise ScaffoldError(f"an exercise name appears twice: {', '.join(exercises)}")
    number = max((c.number for c in course.chapters), default=0) + 1
    if number > 99:
        raise ScaffoldError("chapter ids are chNN: the course has no room for a 100th chapter")
    stage = next_gate = None
    if gate:
        stages = [c.stage for c in course.chapters if c.stage is not None]
        gates = [c.gate for c in course.chapters if c.gate is not None]
        stage = max(stages, default=-1) + 1
        next_gate = max(gates, default=-1) + 1
    summary = " ".join((summary or f"TODO(author): chapter {number}'s promise, in one line.").split())
    return NewChapter(f"ch{number:02d}", title, exercises, summary, stage, next_gate)


def places(root: Path, chapter: NewChapter) -> list[Place]:
    """Every file the chapter needs, with its new text: checked, nothing written."""
    root = Path(root)
    for tree in (EXERCISES, SOLUTIONS):
        if (root / tree / chapter.id).exists():
            raise ScaffoldError(f"{tree}/{chapter.id}/ exists already: a new chapter starts from nothing")
    mutants_path = f"tests/mutants/{chapter.id}.toml"
    if (root / mutants_path).exists():
        raise ScaffoldError(f"{mutants_path} exists already")
    found = [Place(COURSE_FILE, _read(root, COURSE_FILE).rstrip("\n") + "\n" + templates.course_entry(chapter),
                   f"the chapter's entry and {_count(chapter.exercises, 'exercise')}", created=False),
             Place(f"{EXERCISES}/{chapter.id}/README.md", templates.readme(chapter),
                   "the README's sections (docs/authoring.md section 3)", created=True)]
    for name in chapter.exercises:
        found += [Place(module_in_tree(EXERCISES, chapter.id, name), templates.stub(chapter, name), "the stub",
                        created=True),
                  Place(f"{EXERCISES}/{chapter.id}/test_{name}.py", templates.graded_test(chapter, name),
                        "the graded tests", created=True),
                  Place(module_in_tree(SOLUTIONS, chapter.id, name), templates.solution(chapter, name),
                        "the solution", created=True)]
    found.append(Place(mutants_path, templates.mutants(chapter),
                       f"{_count(chapter.exercises, 'mutant')} the graded tests catch", created=True))
    if chapter.gate is not None:
        found += _gate_places(root, chapter)
    found += _doc_places(root, chapter)
    return found


def write(root: Path, chapter: NewChapter) -> list[Place]:
    """Write every place of the chapter (all of them checked first); the places written."""
    written = places(root, chapter)
    for place in written:
        path = Path(root) / place.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(place.text, encoding="utf-8")
    return written


def _gate_places(root: Path, chapter: NewChapter) -> list[Place]:
    table = _read(root, GATE_TABLE, why="the gate table lives in the course's package source")
    count, closing = _gate_table_shape(table)
    if count != chapter.gate:
        raise ScaffoldError(f"{GATE_TABLE} lists {count} gates but course.toml {chapter.gate}: "
                            f"make the two agree first (tests/test_gates.py)")
    lines = table.splitlines(keepends=True)
    if lines[closing].strip() != ")":
        raise ScaffoldError(f"{GATE_TABLE}:{closing + 1}: expected the gate table to close with ')' on a line "
                            f"of its own")
    table = "".join(lines[:closing]) + templates.gate_entry(chapter) + "".join(lines[closing:])
    schema = json.loads(_read(root, RECORDS_SCHEMA))
    schema["properties"]["gate"]["maximum"] = chapter.gate
    return [Place(GATE_TABLE, table, f"gate {chapter.gate:02d} in the gate table", created=False),
            Place(f"{EXERCISES}/{chapter.id}/test_gate{chapter.gate:02d}.py", templates.gate_test(chapter),
                  "the gate's test: its kernels correct and the learner's own", created=True),
            Place(RECORDS_SCHEMA, json.dumps(schema, indent=2, ensure_ascii=False) + "\n",
                  f"the records' gate maximum, {chapter.gate}", created=False)]


def _gate_table_shape(source: str) -> tuple[int, int]:
    """(how many gates `GATES = (...)` lists, the 0-based line its closing parenthesis is on)."""
    for node in ast.parse(source).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "GATES" and isinstance(node.value, ast.Tuple):
            return len(node.value.elts), node.value.end_lineno - 1
    raise ScaffoldError(f"{GATE_TABLE} has no GATES = (...) table")


def _doc_places(root: Path, chapter: NewChapter) -> list[Place]:
    """The docs that list every chapter or gate, where this checkout has them in the expected shape."""
    found = []
    readme = _optional(root, COURSE_README)
    rows = list(_COURSE_ROW.finditer(readme or ""))
    if rows:
        at = rows[-1].end()
        found.append(Place(COURSE_README, readme[:at] + templates.course_table_row(chapter) + readme[at:],
                           "the chapter's row in the course table", created=False))
    facts = _optional(root, FACTS_DOC)
    if facts is not None:
        found.append(Place(FACTS_DOC, facts.rstrip("\n") + "\n" + templates.facts_section(chapter),
                           "the chapter's section of toolchain claims (none yet)", created=False))
    gates_doc = _optional(root, GATES_DOC)
    if chapter.gate is not None and gates_doc is not None and _GATES_DOC_BEFORE in gates_doc:
        at = gates_doc.index(_GATES_DOC_BEFORE)
        found.append(Place(GATES_DOC, gates_doc[:at] + templates.gates_doc_section(chapter) + gates_doc[at:],
                           "the gate's criteria table", created=False))
    return found


def _read(root: Path, path: str, why: str = "") -> str:
    text = _optional(root, path)
    if text is None:
        raise ScaffoldError(f"{Path(root) / path} is missing{': ' + why if why else ''}")
    return text


def _optional(root: Path, path: str) -> str | None:
    file = Path(root) / path
    return file.read_text(encoding="utf-8") if file.is_file() else None


def _count(items, noun: str) -> str:
    return f"{len(items)} {noun}{'s' if len(items) != 1 else ''}"
