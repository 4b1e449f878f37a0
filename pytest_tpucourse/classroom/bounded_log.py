"""What a graded process printed, kept bounded: its first and last lines, each cut short.

A tree's process may print anything, and as much as it likes (200 MB of one line, escape
codes): the grader keeps the first HEAD_LINES and the last TAIL_LINES lines, each cut at
LINE_CHARS characters, and counts what it left out, so neither its memory nor the gradebook
grows with what a tree prints. Bytes are decoded as UTF-8 with replacement; what a terminal
or a spreadsheet would act on is escaped where the text is shown (escaping.py), not here.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

HEAD_LINES = 20
TAIL_LINES = 20
LINE_CHARS = 400
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class KeptLog:
    """The first and last lines of a stream, and how many lines in between were left out."""

    first: tuple[str, ...] = ()
    last: tuple[str, ...] = ()
    left_out: int = 0

    def lines(self) -> list[str]:
        """Every kept line, with one line saying how many were left out between them."""
        gap = [f"[... {self.left_out} lines left out ...]"] if self.left_out else []
        return [*self.first, *gap, *self.last]

    def __bool__(self) -> bool:
        return bool(self.first or self.last)


class BoundedLog:
    """Fed bytes as they come (`feed`), keeps the first and last lines of them (`kept`)."""

    def __init__(self, head: int = HEAD_LINES, tail: int = TAIL_LINES, line_chars: int = LINE_CHARS):
        self.head, self.line_chars = head, line_chars
        self.first: list[str] = []
        self.last: collections.deque[str] = collections.deque(maxlen=tail)
        self.lines_seen = 0
        self._line = bytearray()  # the line being read, at most line_chars * 4 bytes of it
        self._line_cut = False

    def feed(self, data: bytes) -> None:
        start = 0
        while start < len(data) and len(self.first) < self.head:  # line by line until the head is full
            end = data.find(b"\n", start)
            if end < 0:
                self._extend(data[start:])
                return
            self._extend(data[start:end])
            self._end_line()
            start = end + 1
        if start >= len(data):
            return
        first, last = data.find(b"\n", start), data.rfind(b"\n")
        if first < 0:
            self._extend(data[start:])
            return
        self._extend(data[start:first])
        self._end_line()
        between = data.count(b"\n", first + 1, last + 1)  # whole lines after the first: only the last few kept
        kept, end = [], last
        while len(kept) < min(between, self.last.maxlen):
            begin = data.rfind(b"\n", first, end)
            kept.append(data[begin + 1:end])
            end = begin
        self.lines_seen += between - len(kept)
        for line in reversed(kept):
            self._extend(line)
            self._end_line()
        self._extend(data[last + 1:])

    def _extend(self, piece: bytes) -> None:
        room = self.line_chars * 4 - len(self._line)  # a UTF-8 character is at most 4 bytes
        if len(piece) > room:
            self._line_cut = True
        self._line += piece[:max(room, 0)]

    def close(self) -> None:
        if self._line or self._line_cut:
            self._end_line()

    def _end_line(self) -> None:
        text = self._line.decode("utf-8", "replace").rstrip("\r")
        if self._line_cut or len(text) > self.line_chars:
            text = text[:self.line_chars] + " [... cut]"
        self._line, self._line_cut = bytearray(), False
        self.lines_seen += 1
        if len(self.first) < self.head:
            self.first.append(text)
        else:
            self.last.append(text)

    def kept(self) -> KeptLog:
        left_out = self.lines_seen - len(self.first) - len(self.last)
        return KeptLog(tuple(self.first), tuple(self.last), left_out)


def drain(stream, log: BoundedLog) -> None:
    """Read `stream` (a binary pipe) to its end into `log` (run in a thread of its own)."""
    try:
        while True:
            data = stream.read1(CHUNK_BYTES) if hasattr(stream, "read1") else stream.read(CHUNK_BYTES)
            if not data:
                break
            log.feed(data)
    except (OSError, ValueError):
        pass
    finally:
        log.close()
