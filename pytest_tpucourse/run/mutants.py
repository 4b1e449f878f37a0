"""Deliberately wrong kernels: how the course proves its graders catch mistakes.

A chapter's mutants live in `tests/mutants/chNN.toml`; each is a list of textual
edits of one solution module. The same file may list `equivalents`: edits that
keep the kernel correct (another schedule, JAX's own kernel), which the graders
must accept. `build_tree` writes a tree laid out like solutions/ (the whole
chapter, with the one module edited) for `--impl-root`.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..core.course import module_in_tree


class MutantError(Exception):
    """A mutant no longer applies to the solution it mutates."""


@dataclass(frozen=True)
class Mutant:
    chapter: str
    name: str
    module: str
    why: str
    caught_by: tuple[str, ...]
    edits: tuple[tuple[str, str], ...]
    pytest_args: tuple[str, ...] = ()  # added to its grading run (a short --kernel-timeout)
    cause: str | None = None  # what the mistake is, in diagnosis/causes.py's words (kernel chapters)
    # What the chapter README's mistakes table quotes of this mutant's run ("..." stands for text
    # left out): each must be in the table and in what the mutant's run prints (says_pattern).
    says: tuple[str, ...] = ()

    def apply(self, source: str) -> str:
        for find, replace in self.edits:
            count = source.count(find)
            if count != 1:
                raise MutantError(
                    f"mutant {self.chapter}.{self.name}: {find!r} occurs {count} times in "
                    f"{self.module}.py (must be exactly once)"
                )
            source = source.replace(find, replace)
        return source


def load_mutants(path: Path, table: str = "mutants") -> list[Mutant]:
    """The wrong kernels of one chapter (table="equivalents": the correct variants)."""
    path = Path(path)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    chapter = path.stem
    return [
        Mutant(
            chapter=chapter,
            name=raw["name"],
            module=raw["module"],
            why=raw["why"],
            caught_by=tuple(raw.get("caught_by", ())),
            edits=tuple((e["find"], e["replace"]) for e in raw["edits"]),
            pytest_args=tuple(raw.get("pytest_args", ())),
            cause=raw.get("cause"),
            says=tuple(raw.get("says", ())),
        )
        for raw in data.get(table, [])
    ]


def says_pattern(quoted: str) -> re.Pattern:
    """A README's quote of a run as a pattern of the run's output: "..." matches any text, and any
    run of white space (a wrapped line, an indent) any other."""
    parts = [r"\s+".join(re.escape(word) for word in part.split()) for part in quoted.split("...")]
    return re.compile(r"(?s)" + ".*?".join(parts))


def build_tree(mutant: Mutant, solutions_root: Path, destination: Path) -> Path:
    """Write destination/<chapter>/ = solutions with the mutant applied; return destination."""
    source_dir = Path(solutions_root) / mutant.chapter
    target_dir = Path(destination) / mutant.chapter
    shutil.copytree(source_dir, target_dir, ignore=shutil.ignore_patterns("__pycache__"))
    module_path = Path(module_in_tree(destination, mutant.chapter, mutant.module))
    module_path.write_text(mutant.apply(module_path.read_text(encoding="utf-8")), encoding="utf-8")
    return Path(destination)
