"""A place in the user's source, as jaxprs, StableHLO and optimized HLO all print it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A source range as all three layers print it: 1-based lines, columns as printed."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    @property
    def start(self) -> tuple[str, int, int]:
        """What links the layers: optimized HLO keeps one range per start, so ends differ."""
        return (self.file, self.line, self.column)
