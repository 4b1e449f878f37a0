"""Evidence for the instructor: graded files alike across the class, and alike to solutions/.

As MOSS does (Schleimer, Wilkerson and Aiken, "Winnowing", 2003): each graded file (a tree's
`chNN/<module>.py`) is read as Python tokens, names, strings and numbers made placeholders,
comments, docstrings and layout dropped, so renaming and reformatting change nothing; its
fingerprints are the hashes of every run of K tokens, winnowed (the smallest of each WINDOW
in a row). What a file shares with the shipped stub (the course's starting point, which every
tree began from) is not counted. Two files' similarity is the share of the smaller one's
fingerprints that the other holds. Listed: pairs at or above THRESHOLD, most alike first,
saying whether they are byte for byte identical, identical code (the same tokens once names
and layout are set aside) or similar; and each file alike to the course's own solution. A file
with fewer than MIN_PRINTS fingerprints of its own (a few lines) is too short to compare, and a
file reached through a link out of its tree is not the tree's.

A file Python cannot read as source (an encoding it lacks) is not compared: the report lists it
under `not_read`, saying why. Beside the pairs, the report lists the tree's files that reach into
the course's package or the process around them (course_reach.py): a tree that answers with the
course's own oracles gives right values, and only its source shows it.

This is evidence for a person to read beside the files, never a verdict: two learners may
write the same short kernel, and a course's idiom leaves little room. Nothing here changes
the gradebook. The grader reads the files without following links, after the gradebook is
written, within the class's budget (report_budget.py: files per tree, bytes per file, seconds for
the class), listing under `skipped` what it did not read for it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.course import Course, module_in_tree, shipped_names
from . import course_reach, normalised_code, python_source
from .escaping import for_terminal
from .report_budget import Budget

FORMAT = 3
K = 12  # tokens per fingerprinted run
WINDOW = 6  # runs per winnowing window: every shared run of K + WINDOW - 1 tokens is found
THRESHOLD = 0.8
_CHAPTER = re.compile(r"ch\d\d")
MIN_PRINTS = 8  # a file with fewer fingerprints of its own is too short to be anybody's in particular
NOTE = ("Evidence for a person to read, never a verdict: files of different trees (or a tree and "
        "solutions/) whose code is alike once names, strings, comments and layout are set aside, and "
        "files that reach into the course's package or the process around them where the chapter's own "
        "stubs and solutions do not. Two learners may write the same short kernel; read the files before "
        "concluding anything. The gradebook does not use this report.")


@dataclass(frozen=True)
class Fingerprinted:
    """One graded module with the helpers it may run: its bytes' digest, its normalised tokens' digest,
    its winnowed fingerprints."""

    shown: str  # how the report names it
    sha256: str
    code: str
    prints: frozenset[int]
    helpers: tuple[str, ...] = ()  # the helper files compared with it, as the report names them


class _Helpers:
    """The files beside a tree's graded modules that they may import or execute (`_mine.py`, a
    `notes.txt`): every regular file of the chapter's folder but those the course ships there (the
    graded modules, README.md, the capstone's write-up) and test files, and every file in a folder of
    the tree that is no chapter's (`lib/kernel.py`), read once per tree and chapter within the budget."""

    def __init__(self, budget: Budget, course_root: Path):
        self.budget, self.course_root, self.read = budget, course_root, {}

    def of(self, tree: str, chapter: str) -> list[tuple[str, bytes]]:
        if (tree, chapter) not in self.read:
            found, shipped = [], shipped_names(self.course_root, chapter)
            for path in python_source.tree_files(Path(tree)):
                relative = path.relative_to(tree)
                in_chapter = len(relative.parts) == 2 and relative.parts[0] == chapter
                shared = len(relative.parts) > 1 and not _CHAPTER.fullmatch(relative.parts[0])
                if (not (in_chapter or shared) or path.name.startswith("test_")
                        or path.name in ("conftest.py", "README.md") or (in_chapter and path.name in shipped)):
                    continue
                if self.budget.may_read(f"similarity:{tree}", str(path), _size(path)):
                    data = python_source.read(path)
                    if data is not None:
                        found.append((str(path), data))
            self.read[(tree, chapter)] = found
        return self.read[(tree, chapter)]


def _with_helpers(*found: Fingerprinted) -> dict:
    """The helper files a pair's modules were compared with, where there were any."""
    helpers = {one.shown: list(one.helpers) for one in found if one.helpers}
    return {"with_helpers": helpers} if helpers else {}


def report(course: Course, chapters, trees: list[str], budget: Budget | None = None) -> dict:
    """The class's report: `trees` as the gradebook names them, their graded files compared, within
    `budget` (report_budget.py: files per tree, bytes per file, seconds for the class; what it
    skipped is listed)."""
    budget = budget if budget is not None else Budget()
    modules = [(c.id, e.name) for c in course.chapters if c.id in chapters for e in c.exercises]
    helpers = _Helpers(budget, course.root)
    pairs, like_solutions, not_read, files = [], [], [], 0
    for chapter, module in modules:
        stub = _fingerprint(Path(module_in_tree(course.root / "exercises", chapter, module)), "")
        base = stub.prints if stub else frozenset()
        solution = _fingerprint(Path(module_in_tree(course.root / "solutions", chapter, module)),
                                module_in_tree("solutions", chapter, module), base)
        graded = []
        for tree in sorted(trees):
            shown = module_in_tree(tree, chapter, module)
            if not python_source.inside(Path(shown), Path(tree)):
                continue  # reached through a link out of the tree: not the tree's file
            if not budget.may_read(f"similarity:{tree}", shown, _size(Path(shown))):
                continue
            try:
                found = _fingerprint(Path(shown), shown, base, helpers.of(tree, chapter))
            except python_source.UnreadableSource as error:
                not_read.append({"file": shown, "why": str(error)})
                continue
            if found is None or (stub is not None and found.code == stub.code) or len(found.prints) < MIN_PRINTS:
                continue  # no such file, the stub as shipped, or too short to tell
            graded.append(found)
        files += len(graded)
        for i, one in enumerate(graded):
            for other in graded[i + 1:]:
                alike = _alike(one, other)
                if alike:
                    pairs.append({"files": [one.shown, other.shown], **alike, **_with_helpers(one, other)})
            if solution is not None:
                alike = _alike(one, solution)
                if alike:
                    like_solutions.append({"file": one.shown, "solution": solution.shown, **alike,
                                           **_with_helpers(one)})
    order = lambda entry: (-entry["similarity"], json.dumps(entry))  # noqa: E731
    reach, held = course_reach.scan(course, trees, budget)
    return {"format": FORMAT, "note": NOTE,
            "method": f"winnowed {K}-token fingerprints (window {WINDOW}) of each graded file, the "
                      f"shipped stub's left out; pairs at {THRESHOLD:.0%} or more of the smaller file",
            "chapters": list(chapters), "files_compared": files,
            "pairs": sorted(pairs, key=order), "like_solutions": sorted(like_solutions, key=order),
            "not_read": not_read, "reach_the_course": reach, "hold_solutions": held,
            "limits": budget.limits(), "skipped": budget.skipped, "skipped_count": budget.skipped_count}


def _size(path: Path) -> int | None:
    try:
        return path.lstat().st_size
    except OSError:
        return None


def unmade(chapters, why: str) -> dict:
    """The report where it could not be made, saying why: still written beside the gradebook."""
    return {"format": FORMAT, "note": NOTE, "error": f"the report could not be made: {why}"[:1000],
            "chapters": list(chapters), "files_compared": 0, "pairs": [], "like_solutions": [], "not_read": [],
            "reach_the_course": [], "hold_solutions": [], "limits": Budget().limits(), "skipped": [],
            "skipped_count": 0}


def write(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def path_beside(gradebook: Path | str) -> Path:
    """The report's file beside the gradebook: book.json -> book.similarity.json."""
    gradebook = Path(gradebook)
    return gradebook.with_name(f"{gradebook.stem}.similarity.json")


def summary_line(data: dict, path: Path) -> str:
    return (f"similarity: {len(data['pairs'])} pairs of alike files, {len(data['like_solutions'])} files "
            f"alike to solutions/, of {data['files_compared']} compared; {len(data.get('hold_solutions', []))} files "
            f"anywhere in the trees holding a shipped solution; {len(data['reach_the_course'])} files "
            f"reach into the course or the process around them; {len(data['not_read'])} not readable as Python; "
            f"{data.get('skipped_count', 0)} skipped for the reports' limits "
            f"(evidence for a person, not a verdict): {for_terminal(str(path))}")


def _alike(one: Fingerprinted, other: Fingerprinted) -> dict | None:
    if one.sha256 == other.sha256:
        return {"how": "identical", "similarity": 1.0}
    if one.code == other.code:
        return {"how": "identical code", "similarity": 1.0}
    smaller = min(len(one.prints), len(other.prints))
    if not smaller:
        return None
    share = len(one.prints & other.prints) / smaller
    return {"how": "similar", "similarity": round(share, 3)} if share >= THRESHOLD else None


def _fingerprint(path: Path, shown: str, base: frozenset[int] = frozenset(), helpers=()) -> Fingerprinted | None:
    """The module's fingerprints with its helpers' ([(shown, bytes)]: compared as one, the code it
    runs) (None: no such regular file); UnreadableSource where Python cannot read the module."""
    data = python_source.read(path)
    if data is None:
        return None
    tokens = normalised_code.tokens(data)
    digest = hashlib.sha256(data)
    used = []
    for helper, source in helpers:
        try:
            more = normalised_code.tokens(source)
        except python_source.UnreadableSource:
            continue  # not Python: nothing it could run as code
        if more:
            tokens += more
            digest.update(b"\0" + source)
            used.append(helper)
    code = hashlib.sha256("\0".join(tokens).encode()).hexdigest()
    return Fingerprinted(shown, digest.hexdigest(), code, winnow(tokens) - base, tuple(used))


def winnow(tokens: list[str]) -> frozenset[int]:
    """The winnowed fingerprints of every run of K tokens."""
    hashes = [int.from_bytes(hashlib.blake2b("\0".join(tokens[i:i + K]).encode(), digest_size=8).digest(), "big")
              for i in range(len(tokens) - K + 1)]
    if len(hashes) <= WINDOW:
        return frozenset(hashes)
    return frozenset(min(hashes[i:i + WINDOW]) for i in range(len(hashes) - WINDOW + 1))
