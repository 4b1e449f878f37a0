"""The course as data: `course.toml` at the root of a course checkout.

The plugin is active only inside a course checkout (a pytest rootdir holding
`course.toml`); everything it knows about chapters, exercises, gates and hints
comes from that one file.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

COURSE_FILE = "course.toml"
CHAPTER_ID = re.compile(r"^ch\d\d$")
# The two trees a checkout ships, relative to its root; a graded tree is laid out like either.
EXERCISES = "exercises"  # the learner's stubs and the graded tests
SOLUTIONS = "solutions"


def module_in_tree(tree, chapter_id: str, module: str) -> str:
    """`<tree>/chNN/<module>.py`: where a chapter's module lives in a tree laid out like solutions/
    (tree: exercises, solutions, or the root of any such tree)."""
    return f"{tree}/{chapter_id}/{module}.py"


class CourseDataError(Exception):
    """course.toml is missing a field or contradicts itself."""


@dataclass(frozen=True)
class Exercise:
    chapter: str
    name: str  # also the module name and the graded test file test_<name>.py
    function: str
    summary: str
    hints: tuple[str, ...]
    # Functions the stub ships written, for the learner to read or to fix (a kernel that
    # deadlocks on purpose, say); every other public function of a stub is a TODO.
    given: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The id a learner types: `ch11.matmul`."""
        return f"{self.chapter}.{self.name}"

    @property
    def module_file(self) -> str:
        return f"{self.name}.py"

    @property
    def test_file(self) -> str:
        return f"test_{self.name}.py"

    @property
    def module_path(self) -> str:
        """The stub the learner edits, relative to the course root: exercises/ch11/matmul.py."""
        return module_in_tree(EXERCISES, self.chapter, self.name)

    @property
    def test_path(self) -> str:
        """Its graded tests: exercises/ch11/test_matmul.py."""
        return f"{EXERCISES}/{self.chapter}/{self.test_file}"

    @property
    def solution_path(self) -> str:
        """The shipped solution: solutions/ch11/matmul.py."""
        return module_in_tree(SOLUTIONS, self.chapter, self.name)


@dataclass(frozen=True)
class Chapter:
    id: str
    title: str
    kind: str  # "layer" or "stage"
    summary: str
    stage: int | None = None
    gate: int | None = None
    exercises: tuple[Exercise, ...] = field(default_factory=tuple)
    can_you: tuple[str, ...] = ()  # the self-test's items, ticked by the learner (self-reported)

    @property
    def number(self) -> int:
        return int(self.id[2:])

    @property
    def label(self) -> str:
        return f"chapter {self.number} {self.title}"

    def exercise(self, name: str) -> Exercise | None:
        return next((e for e in self.exercises if e.name == name), None)

    def exercise_for_test_file(self, filename: str) -> Exercise | None:
        return next((e for e in self.exercises if e.test_file == filename), None)


@dataclass(frozen=True)
class Course:
    root: Path
    title: str
    chapters: tuple[Chapter, ...]
    chapters_total: int
    gates_total: int

    def chapter(self, chapter_id: str) -> Chapter | None:
        return next((c for c in self.chapters if c.id == chapter_id), None)

    def exercise(self, key: str) -> Exercise | None:
        """Look up `ch11.matmul`."""
        chapter_id, _, name = key.partition(".")
        chapter = self.chapter(chapter_id)
        return chapter.exercise(name) if chapter else None

    def chapter_of_path(self, path: Path) -> Chapter | None:
        """The chapter a file under exercises/chNN/ belongs to, if any."""
        try:
            relative = Path(path).resolve().relative_to(self.root / EXERCISES)
        except ValueError:
            return None
        return self.chapter(relative.parts[0]) if relative.parts else None


def shipped_names(course_root: Path, chapter_id: str, trees=(EXERCISES, SOLUTIONS)) -> set[str]:
    """The names of the files the course ships in a chapter's folder of these trees (the README, the
    capstone's write-up and config, the graded modules): a learner's own files are the others."""
    names = set()
    for tree in trees:
        folder = Path(course_root) / tree / chapter_id
        if folder.is_dir():
            names.update(path.name for path in folder.iterdir() if path.is_file())
    return names


def find_course_root(start: Path) -> Path | None:
    """The nearest directory at or above `start` holding course.toml."""
    start = Path(start).resolve()
    for directory in (start, *start.parents):
        if (directory / COURSE_FILE).is_file():
            return directory
    return None


def load_course(root: Path) -> Course:
    root = Path(root).resolve()
    path = root / COURSE_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise CourseDataError(f"{path}: {error}") from None
    meta = data.get("course", {})
    chapters = tuple(_chapter(path, raw) for raw in data.get("chapters", []))
    ids = [c.id for c in chapters]
    if len(set(ids)) != len(ids):
        raise CourseDataError(f"{path}: a chapter id appears twice: {ids}")
    return Course(
        root=root,
        title=meta.get("title", "course"),
        chapters=chapters,
        # Counted from the chapters; a course.toml may still state them (a course written
        # chapter by chapter shows its planned size).
        chapters_total=int(meta.get("chapters_total", len(chapters))),
        gates_total=int(meta.get("gates_total", sum(c.gate is not None for c in chapters))),
    )


def _chapter(path: Path, raw: dict) -> Chapter:
    chapter_id = raw.get("id", "")
    if not CHAPTER_ID.match(chapter_id):
        raise CourseDataError(f"{path}: chapter id {chapter_id!r} is not of the form chNN")
    for key in ("title", "kind"):
        if key not in raw:
            raise CourseDataError(f"{path}: chapter {chapter_id} has no {key!r}")
    exercises = []
    for ex in raw.get("exercises", []):
        missing = [k for k in ("name", "function", "hints") if k not in ex]
        if missing:
            raise CourseDataError(f"{path}: an exercise of {chapter_id} lacks {missing}")
        exercises.append(
            Exercise(
                chapter=chapter_id,
                name=ex["name"],
                function=ex["function"],
                summary=ex.get("summary", ""),
                hints=tuple(ex["hints"]),
                given=tuple(ex.get("given", ())),
            )
        )
    return Chapter(
        id=chapter_id,
        title=raw["title"],
        kind=raw["kind"],
        summary=raw.get("summary", ""),
        stage=raw.get("stage"),
        gate=raw.get("gate"),
        exercises=tuple(exercises),
        can_you=tuple(raw.get("can_you", ())),
    )
