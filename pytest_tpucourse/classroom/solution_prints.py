"""The shipped solutions' fingerprints, and which of them a tree's file is.

`tpucourse grade` shows a tree's sandbox no solutions/; the grader, outside every sandbox, keeps
two fingerprints of each shipped solution file (its bytes' sha256, and the sha256 of its code
normalised as the similarity report compares it: names, layout, no-op statements and the order
of independent lines aside, normalised_code.py) and looks for them in every file of every tree,
wherever it sits and whatever it is called (a `_softmax.py` helper, a `softmax.txt` a module
execs, a member of a `lib.zip`). A file shorter than MIN_FILE_BYTES can be anybody's and is not
compared. What it finds is evidence in the similarity report, beside the gradebook.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ..core.course import SOLUTIONS
from . import normalised_code, python_source

MIN_FILE_BYTES = 200  # grading/solution_code.MIN_FILE_BYTES: a file this short can be anybody's


class Prints:
    """{fingerprint: the solution file it is of, as shown} for bytes and for normalised code."""

    def __init__(self, by_bytes: dict[str, str], by_code: dict[str, str]):
        self.by_bytes, self.by_code = by_bytes, by_code

    def copy_of(self, source: bytes) -> tuple[str, str] | None:
        """(the solution file, how: "byte for byte" or "its code") that `source` is, or None."""
        if len(source) < MIN_FILE_BYTES:
            return None
        found = self.by_bytes.get(hashlib.sha256(source).hexdigest())
        if found is not None:
            return found, "byte for byte"
        try:
            found = self.by_code.get(normalised_code.code_digest(source))
        except python_source.UnreadableSource:
            return None
        return (found, "its code, names, layout and no-op statements aside") if found is not None else None


@functools.lru_cache(maxsize=4)
def of(course_root: Path) -> Prints:
    """The fingerprints of every .py file under the course's solutions/."""
    by_bytes, by_code = {}, {}
    for path in sorted((Path(course_root) / SOLUTIONS).rglob("*.py")):
        source = python_source.read(path)
        if source is None or len(source) < MIN_FILE_BYTES:
            continue
        shown = path.relative_to(course_root).as_posix()
        by_bytes.setdefault(hashlib.sha256(source).hexdigest(), shown)
        try:
            by_code.setdefault(normalised_code.code_digest(source), shown)
        except python_source.UnreadableSource:
            continue
    return Prints(by_bytes, by_code)
