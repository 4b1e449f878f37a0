"""Gate records: one JSON line per measurement, appended to bench/records.jsonl.

Every row says what its number is (`method`):
  roofline-predicted  a floor computed from the chip's figures; it never passes or fails
  off-chip-verified   a correctness result under interpret mode (or on a CPU); no time
  measured            run natively on the chip the row names

The honesty rule is enforced where a row is made: `Record` refuses `measured` from a
CPU or from interpret mode, refuses a prediction with a verdict, and refuses a time
from an off-chip run. A measured floor, ceiling or compute-alone timed next to a
kernel is a `reference` (it judges the kernel's row, never a criterion); an implementation that
cannot run on the hardware is `not-runnable`, with no value, never a pass. The
schema is docs/records-schema.json; docs/gates.md explains it.

Appends are safe from several processes (pytest -n) and from Ctrl-C: the line is
written with one write() under an exclusive flock, then fsync'd; a line cut short
by a killed machine is reported by the reader, with path and line number, never
skipped. Rows are never rewritten or deleted: a later measured row replaces an
earlier one only in the report (`current`).
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import chips
from .criteria import GATE_NUMBERS, gate_range

SCHEMA_VERSION = 1
METHODS = ("roofline-predicted", "off-chip-verified", "measured")
VERDICTS = ("pass", "fail", "pending", "reference", "not-runnable")
# reference:    a floor or ceiling timed next to a kernel so the kernel can be judged; it
#               neither passes nor fails a criterion itself
# not-runnable: the implementation cannot run on this hardware (a TPU Pallas kernel on a
#               GPU); the row carries no value and is never a pass
IMPLEMENTATIONS = ("floor", "kernel", "ceiling", "compute-alone")
# compute-alone: the compute of a distributed kernel with no communication at all (gate 04's
#               collective matmul is judged against the matmul of the already-gathered input);
#               like a floor or a ceiling it is a reference that judges the kernel
ACCELERATORS = ("tpu", "gpu")
DEFAULT_PATH = Path("bench") / "records.jsonl"


class HonestyError(ValueError):
    """A row would claim more than the run behind it showed."""


class CorruptRecords(ValueError):
    """A records file holds a line that is not a valid row."""

    def __init__(self, path, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


@dataclass(frozen=True)
class Record:
    gate: int
    criterion: str
    chapter: str
    test_id: str
    implementation: str
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    chip: str
    method: str
    statistic: str  # "floor", "median", "relative-error", ...
    value: float | None  # None only for a not-runnable row
    unit: str  # "s" for times
    verdict: str
    platform: str  # what ran it: cpu, gpu, tpu
    device_kind: str
    interpret: bool  # a Pallas interpreter ran the kernel
    spread: float | None = None  # interquartile range, same unit as value
    ratio_to_floor: float | None = None
    ratio_to_ceiling: float | None = None
    ratio_to_compute_alone: float | None = None
    date: str = ""
    jax: str = ""
    jaxlib: str = ""
    libtpu: str | None = None
    git_commit: str | None = None
    host: str = ""
    notes: str = ""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))
        if not self.date:
            object.__setattr__(self, "date", utc_now())
        _one_of("method", self.method, METHODS)
        _one_of("verdict", self.verdict, VERDICTS)
        _one_of("implementation", self.implementation, IMPLEMENTATIONS)
        if self.verdict == "not-runnable":
            if self.method != "measured" or self.implementation == "floor" or self.value is not None:
                raise ValueError(f"{self.test_id}: a not-runnable row is a kernel or ceiling on real "
                                 f"hardware, method measured, value None")
        elif (not isinstance(self.value, (int, float)) or isinstance(self.value, bool)
              or not math.isfinite(self.value)):
            raise ValueError(f"{self.test_id}: value must be a finite number, got {self.value!r}")
        if self.verdict == "reference" and (self.method != "measured" or self.implementation == "kernel"):
            raise ValueError(f"{self.test_id}: a reference row is a measured floor or ceiling, "
                             f"got a {self.method} {self.implementation}")
        if not isinstance(self.gate, int) or self.gate not in GATE_NUMBERS:
            raise ValueError(f"gate must be {gate_range()}, got {self.gate!r}")
        if self.method == "measured":
            if self.platform not in ACCELERATORS or self.interpret:
                raise HonestyError(
                    f"{self.test_id}: {'an interpret-mode' if self.interpret else 'a ' + self.platform} run "
                    f"cannot write a measured row; it says nothing about {self.chip} speed"
                )
            detected = chips.chip_for_device(self.platform, self.device_kind)
            if detected is not None and detected != self.chip:
                raise HonestyError(
                    f"{self.test_id}: measured on {self.device_kind!r} ({detected}) but labelled {self.chip}"
                )
        elif self.method == "roofline-predicted":
            if self.verdict != "pending":
                raise HonestyError(f"{self.test_id}: a roofline prediction cannot {self.verdict}")
        elif self.unit == "s":
            raise HonestyError(
                f"{self.test_id}: an off-chip run cannot record a time; interpret-mode timings "
                f"are not kernel speed"
            )
        if self.verdict == "pending" and self.method != "roofline-predicted":
            raise ValueError(f"{self.test_id}: only predictions are pending; a {self.method} row passes or fails")

    @property
    def slot(self) -> tuple:
        """What a row is a measurement of; a measured row replaces a prediction in its slot."""
        return (self.gate, self.criterion, self.op, self.shapes, self.dtype, self.chip, self.implementation)

    def to_json(self) -> str:
        row = dataclasses.asdict(self)
        row["shapes"] = [list(s) for s in self.shapes]
        return json.dumps(row, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, row: dict) -> Record:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(row) - names
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        if row.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version {row.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        try:
            return cls(**row)
        except TypeError as error:  # a required field is missing
            raise ValueError(str(error)) from None


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def append(path, record: Record) -> None:
    """Append one row: one write() under an exclusive lock, then fsync."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (record.to_json() + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A writer died mid-line: start on a fresh line so this row stays whole
            # (the torn line is still reported by `read`).
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"{path}: short write ({written} of {len(line)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def read(path) -> list[Record]:
    """Every row of a records file; a bad line raises CorruptRecords naming it."""
    path = Path(path)
    if not path.exists():
        return []
    records, seen = [], set()
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if number == len(lines):
            raise CorruptRecords(path, number, "the last line has no newline: a write was cut short")
        try:
            record = Record.from_dict(json.loads(raw))
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
            raise CorruptRecords(path, number, f"not a valid row: {error}") from None
        if record.id in seen:
            raise CorruptRecords(path, number, f"row id {record.id} appears twice")
        seen.add(record.id)
        records.append(record)
    return records


_RANK = {"roofline-predicted": 0, "off-chip-verified": 1, "measured": 2}


def current(records) -> list[Record]:
    """The row that speaks for each slot: the latest of its most trustworthy method.

    A measured row replaces the predicted (or off-chip) row of its slot; among
    measured rows the latest wins. Older rows stay in the file and in `history`.
    """
    best: dict[tuple, Record] = {}
    for record in records:
        held = best.get(record.slot)
        if held is None or (_RANK[record.method], record.date) >= (_RANK[held.method], held.date):
            best[record.slot] = record
    return list(best.values())


def failures(records) -> list[Record]:
    """Every failed row ever written (the report shows them; nothing deletes them)."""
    return [r for r in records if r.verdict == "fail"]


def _one_of(what: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
