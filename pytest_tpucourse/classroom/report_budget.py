"""What the similarity and reach reports may spend on a class, and what they skipped for it.

The reports read files every tree chose, in the grader's process, after the gradebook is
written: they must end within a stated time whatever the trees hold. Per tree at most
FILES_PER_TREE files are read, each at most FILE_BYTES (a bigger one is skipped, not cut: half a
file is no evidence), and the whole class within SECONDS. Whatever is not read for these limits
is listed under the report's `skipped`, saying why, so that a person knows what was not looked at.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

FILES_PER_TREE = 200
FILE_BYTES = 256 * 1024
SECONDS = 120.0
SKIPPED_LISTED = 500  # entries of `skipped` kept at most (their count is always said)


@dataclass
class Budget:
    """One class's budget: the clock starts when it is made."""

    seconds: float = SECONDS
    files_per_tree: int = FILES_PER_TREE
    file_bytes: int = FILE_BYTES
    started: float = field(default_factory=time.monotonic)
    skipped: list[dict] = field(default_factory=list)
    skipped_count: int = 0
    _read: dict = field(default_factory=dict)  # tree -> files read

    def out_of_time(self) -> bool:
        return time.monotonic() - self.started > self.seconds

    def may_read(self, tree: str, file: str, size: int | None) -> bool:
        """Whether `file` of `tree` (`size` bytes, None: unknown) is read; if not, it is listed as skipped."""
        if self.out_of_time():
            self.skip(file, f"the reports' {self.seconds:g} s for the class ran out")
            return False
        if size is not None and size > self.file_bytes:
            self.skip(file, f"{size} bytes, over the {self.file_bytes} a file is read at most")
            return False
        if self._read.get(tree, 0) >= self.files_per_tree:
            self.skip(file, f"over the {self.files_per_tree} files a tree is read at most")
            return False
        self._read[tree] = self._read.get(tree, 0) + 1
        return True

    def skip(self, file: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < SKIPPED_LISTED:
            self.skipped.append({"file": file, "why": why})

    def limits(self) -> dict:
        return {"files_per_tree": self.files_per_tree, "file_bytes": self.file_bytes, "seconds": self.seconds}
