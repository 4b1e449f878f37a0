"""Gate records: one JSON line per measurement, appended to a records file.

Every row says what its number is (`method`):
  roofline-predicted  a floor computed from the chip's figures; it never passes or fails
  off-chip-verified   a correctness result under interpret mode (or on a CPU); no time
  measured            run natively on the chip the row names, with its raw timing samples
  self-reported       a public link recorded by `tpucourse records link` (gate 05's upstream
                      submission): the learner's word, never a speed

and whose code it speaks for (`tree`): "exercises" (the learner's own), "solutions" (the
course's reference solutions) or "impl-root:<label>". The learner's rows live in
.tpucourse/records.jsonl (not tracked by git); bench/records.jsonl holds only the course's
rows of its reference solutions (DEFAULT_PATH, PUBLISHED_PATH). A rehearsal of the gates
(`pytest --gates --rehearse`: the whole measuring path on a stand-in clock) marks its rows
`rehearsal` and writes them only to a throwaway file named *.rehearsal.jsonl; `append`
refuses a rehearsal row anywhere else and any other row there, and every reader rejects a
rehearsal row (judge.py): it never counts.

A measured time also says how it was timed (`timed_by`, TIMING_METHODS): "device-profiler"
(the device time of the XLA programs a call ran, read from the profiler's device trace) or
"wall-calls" (host wall time over N calls per sync, an empty sample's time taken off), with
the host's wall time per call and whether the host was the bottleneck (`dispatch_bound`).
Rows of schema 2 were written before rows said so: they are still read, as "wall-calls"
(`timing_method`), and every table says that this was assumed (`timing_assumed`). Since schema 4
a measured row also says how its samples were taken (SAMPLING_FIELDS): N and what sized it, the
per-op device time, the MXU utilisation, a floor's XLA input regime and the seeds of its inputs.

The honesty rule is enforced where a row is made: `Record` refuses `measured` from a CPU
or from interpret mode, refuses a prediction with a verdict, refuses a time from an
off-chip run, and refuses a measured time that does not say how it was timed. Rows are
judged again when they are read (judge.py): nothing a row says about itself is trusted.

Appends are safe from several processes (pytest -n) and from Ctrl-C: the line is written
with one write() under an exclusive flock, then fsync'd. Reading never stops at a bad
line: `read` returns the rows it could parse and every line it could not, with its line
number and why. `repair` moves those lines to a side file; nothing else ever rewrites the
file, so failures stay on file.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from ..core import untrusted_json
from ..core.small_files import UnreadableFile, read_bytes
from .criteria import GATE_NUMBERS, gate_range
from .json_lines import append_line, locked

SCHEMA_VERSION = 4  # 3: a measured time says how it was timed (timed_by, wall_per_call, dispatch_bound);
# 4: and how its samples were taken (calls_per_sample, sized_by, ops, mxu, xla_regime, input_seeds)
READABLE_VERSIONS = (2, 3, 4)  # a schema 2 row predates timed_by: read as "wall-calls", and said to be assumed
TIMING_METHODS = ("device-profiler", "wall-calls")
SIZED_BY = ("device-time", "host-time")  # what set N, the calls per sample (gates/timer.py)
XLA_REGIMES = ("weights-fixed", "all-rotating")  # a floor's inputs while timed (gates/sampling.py)
SAMPLING_FIELDS = ("calls_per_sample", "sized_by", "ops", "mxu", "xla_regime", "input_seeds")  # schema 4
# device-profiler: per call, the summed device durations of the XLA programs the call ran, read
#                  from the profiler's device trace (N calls per sample)
# wall-calls:      host wall time of N calls and one sync, an empty sample's time taken off
ASSUMED_TIMING = "wall-calls"  # how a schema 2 row is read: the only method there was
METHODS = ("roofline-predicted", "off-chip-verified", "measured", "self-reported")
VERDICTS = ("pass", "fail", "pending", "reference", "not-runnable")
# reference:    a floor, ceiling or compute-alone timed next to a kernel so the kernel can be
#               judged; it neither passes nor fails a criterion itself
# not-runnable: the implementation cannot run on this hardware (a TPU Pallas kernel on a
#               GPU, too few chips); the row carries no value and is never a pass
IMPLEMENTATIONS = ("floor", "kernel", "ceiling", "compute-alone")
# compute-alone: the compute of a distributed kernel with no communication at all (gate 04's
#               collective matmul is judged against the matmul of the already-gathered input)
ACCELERATORS = ("tpu", "gpu")
TREES = ("exercises", "solutions")  # or "impl-root:<label>"
TIMED_OUTPUT_CHECK = "timed-output-check"  # statistic of a row whose timed output was wrong
SCHEDULE_CHECK = "schedule-check"  # statistic of a fail row whose kernel's program does not overlap its communication
OWN_WORK = "own-work"  # statistic of a fail row whose kernel is not the graded tree's own (gates/own_work.py)
BELOW_ROOFLINE = "below-roofline"  # statistic of a fail row whose time was below the chip's roofline floor
PUBLIC_LINK = "public-link"  # statistic of a self-reported link row
MAX_BYTES = 512 * 1024 * 1024  # a records file larger than this is read as one bad line, not loaded
ROW_DEPTH = 8  # a row nests 3 deep (its shapes)

DEFAULT_PATH = Path(".tpucourse") / "records.jsonl"  # rows of every run; the learner's progress reads it
PUBLISHED_PATH = Path("bench") / "records.jsonl"  # the course's rows of its reference solutions
SIDE_SUFFIX = ".bad-lines.jsonl"  # where `repair` moves the lines no reader can use
REHEARSAL_SUFFIX = ".rehearsal.jsonl"  # the only files a rehearsal's rows may go to


class HonestyError(ValueError):
    """A row would claim more than the run behind it showed."""


@dataclass(frozen=True)
class Record:
    gate: int
    criterion: str
    chapter: str
    test_id: str
    tree: str  # whose code: exercises, solutions, impl-root:<label>
    implementation: str
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    chip: str  # "" only for a self-reported link, which holds for every chip
    method: str
    statistic: str  # "floor", "median", "checks-passed", "timed-output-check", "public-link"
    value: float | str | None  # None only for a not-runnable row; a str only for a public link
    unit: str  # "s" for times
    verdict: str
    platform: str  # what ran it: cpu, gpu, tpu
    device_kind: str
    interpret: bool  # a Pallas interpreter ran the kernel
    run_id: str = ""  # one measurement: the floor, kernel and ceiling rows timed together share it
    spread: float | None = None  # interquartile range of the samples, same unit as value
    samples: tuple[float, ...] | None = None  # measured times: seconds per call, one per round
    ratio_to_floor: float | None = None
    ratio_to_ceiling: float | None = None
    ratio_to_compute_alone: float | None = None
    ratio_ci: tuple[float, float] | None = None  # 95% interval of the judged ratio
    cost: dict | None = None  # {"flops": ..., "bytes": ...}: what a roofline floor is computed from
    date: str = ""
    jax: str = ""
    jaxlib: str = ""
    libtpu: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    modules: dict = field(default_factory=dict)  # graded module path (relative) -> sha256
    notes: str = ""
    rehearsal: bool = False  # written by `pytest --gates --rehearse`: a stand-in clock, never a result
    timed_by: str | None = None  # a measured time's method, one of TIMING_METHODS (schema 3)
    wall_per_call: float | None = None  # host wall seconds per call in the same samples
    dispatch_bound: bool | None = None  # the host issued calls slower than the device ran them
    calls_per_sample: int | None = None  # N: the calls each sample of a measured time holds
    sized_by: str | None = None  # what set N: one call's device time, or the host's clock (SIZED_BY)
    ops: tuple[dict, ...] | None = None  # per-op device time per call: {"op", "kind", "seconds"}, longest first
    mxu: dict | None = None  # {"model_flops", "executed_flops" (None: not known), "utilisation"} of a time
    xla_regime: str | None = None  # a floor's inputs while timed (XLA_REGIMES)
    input_seeds: tuple[int, ...] | None = None  # the seeds the timed input sets were drawn from
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self):
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))
        if self.samples is not None:
            object.__setattr__(self, "samples", tuple(float(s) for s in self.samples))
        if self.ratio_ci is not None:
            object.__setattr__(self, "ratio_ci", tuple(float(r) for r in self.ratio_ci))
        if isinstance(self.ops, list):
            object.__setattr__(self, "ops", tuple(self.ops))
        if isinstance(self.input_seeds, list):
            object.__setattr__(self, "input_seeds", tuple(self.input_seeds))
        if not self.date:
            object.__setattr__(self, "date", utc_now())
        self._check_types()
        _one_of("method", self.method, METHODS)
        _one_of("verdict", self.verdict, VERDICTS)
        _one_of("implementation", self.implementation, IMPLEMENTATIONS)
        if not (self.tree in TREES or (self.tree.startswith("impl-root:") and len(self.tree) > 10)):
            raise ValueError(f"tree must be exercises, solutions or impl-root:<label>, got {self.tree!r}")
        if not isinstance(self.gate, int) or isinstance(self.gate, bool) or self.gate not in GATE_NUMBERS:
            raise ValueError(f"gate must be {gate_range()}, got {self.gate!r}")
        if self.method == "self-reported":
            self._check_link()
            self._check_timed_by()
            self._check_sampling()
            return
        if self.verdict == "not-runnable":
            if self.method != "measured" or self.implementation == "floor" or self.value is not None:
                raise ValueError(f"{self.test_id}: a not-runnable row is a kernel or ceiling on real "
                                 f"hardware, method measured, value None")
        elif (not isinstance(self.value, (int, float)) or isinstance(self.value, bool)
              or not math.isfinite(self.value)):
            raise ValueError(f"{self.test_id}: value must be a finite number, got {self.value!r}")
        if self.verdict == "reference" and (self.method != "measured" or self.implementation == "kernel"):
            raise ValueError(f"{self.test_id}: a reference row is a measured floor, ceiling or "
                             f"compute-alone, got a {self.method} {self.implementation}")
        if self.method == "measured":
            if not self.rehearsal and (self.platform not in ACCELERATORS or self.interpret):
                raise HonestyError(
                    f"{self.test_id}: {'an interpret-mode' if self.interpret else 'a ' + self.platform} run "
                    f"cannot write a measured row; it says nothing about {self.chip} speed"
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
        if self.samples is not None and self.method != "measured":
            raise HonestyError(f"{self.test_id}: only a measured row carries timing samples")
        self._check_timed_by()
        self._check_sampling()

    def _check_sampling(self) -> None:
        """How a measured time's samples were taken (schema 4): only a measured time says it."""
        said = sorted(name for name in SAMPLING_FIELDS if getattr(self, name) is not None)
        if said and (self.schema_version < 4 or self.method != "measured"):
            raise ValueError(f"{self.test_id}: only a measured row of schema 4 says how its samples were "
                             f"taken ({', '.join(said)} on a schema {self.schema_version} {self.method} row)")
        if self.calls_per_sample is not None and self.calls_per_sample < 1:
            raise ValueError(f"{self.test_id}: calls_per_sample is at least 1, got {self.calls_per_sample!r}")
        if self.sized_by is not None:
            _one_of("sized_by", self.sized_by, SIZED_BY)
        if self.xla_regime is not None:
            _one_of("xla_regime", self.xla_regime, XLA_REGIMES)
        for op in self.ops or ():
            if not (isinstance(op, dict) and set(op) == {"op", "kind", "seconds"} and isinstance(op["op"], str)
                    and isinstance(op["kind"], str) and _is_seconds(op["seconds"])):
                raise ValueError(f"{self.test_id}: an op of the breakdown is {{'op': name, 'kind': kind, "
                                 f"'seconds': s >= 0}}, got {op!r}")
        if self.mxu is not None and not (
                set(self.mxu) == {"model_flops", "executed_flops", "utilisation"}
                and all(v is None or _is_seconds(v) for v in self.mxu.values()) and self.mxu["model_flops"] is not None):
            raise ValueError(f"{self.test_id}: mxu is {{'model_flops', 'executed_flops', 'utilisation'}}, "
                             f"numbers >= 0 (executed_flops or utilisation None where not known), got {self.mxu!r}")
        if self.input_seeds is not None and not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                    for s in self.input_seeds):
            raise ValueError(f"{self.test_id}: input_seeds are integers >= 0, got {self.input_seeds!r}")

    def _check_timed_by(self) -> None:
        """A measured time of schema 3 says how it was timed; nothing else says so."""
        said = {name: getattr(self, name) for name in ("timed_by", "wall_per_call", "dispatch_bound")
                if getattr(self, name) is not None}
        if self.schema_version < 3:
            if said:
                raise ValueError(f"schema_version {self.schema_version} predates {', '.join(sorted(said))}: "
                                 f"a row that says how it was timed is schema {SCHEMA_VERSION}")
            return
        if not self.is_timing:
            if said:
                raise ValueError(f"{self.test_id}: only a measured time says how it was timed "
                                 f"({', '.join(sorted(said))} on a {self.method} row)")
            return
        if self.timed_by is None:
            raise HonestyError(f"{self.test_id}: a measured time says how it was timed: timed_by "
                               f"{' or '.join(TIMING_METHODS)}")
        _one_of("timed_by", self.timed_by, TIMING_METHODS)
        if self.timed_by == "device-profiler" and (self.wall_per_call is None or self.dispatch_bound is None):
            raise ValueError(f"{self.test_id}: a time read from the device trace carries the host's wall time "
                             f"per call (wall_per_call) and whether the host was the bottleneck (dispatch_bound)")
        if self.wall_per_call is not None and not (math.isfinite(self.wall_per_call) and self.wall_per_call > 0):
            raise ValueError(f"{self.test_id}: wall_per_call is a positive number of seconds, "
                             f"got {self.wall_per_call!r}")

    def _check_types(self) -> None:
        """A hand-edited row of the wrong types is refused here, not met later as a traceback."""
        for name, expected in _FIELD_TYPES.items():
            value, types = getattr(self, name), _as_tuple(expected)
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise ValueError(f"{name} has the wrong type: {value!r}")
        if self.ratio_ci is not None and len(self.ratio_ci) != 2:
            raise ValueError(f"ratio_ci is a (low, high) pair, got {self.ratio_ci!r}")
        if self.cost is not None and not (set(self.cost) == {"flops", "bytes"} and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in self.cost.values())):
            raise ValueError(f"cost is {{'flops': n, 'bytes': n}}, got {self.cost!r}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.modules.items()):
            raise ValueError("modules maps a module path to its sha256")
        if self.schema_version not in READABLE_VERSIONS:
            raise ValueError(f"schema_version {self.schema_version!r}, expected "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}")

    def _check_link(self) -> None:
        if self.statistic != PUBLIC_LINK or self.unit != "url" or self.verdict != "pass":
            raise ValueError("a self-reported row is a public link: statistic public-link, unit url, verdict pass")
        check_public_url(self.value)

    @property
    def slot(self) -> tuple:
        """What a row is a measurement of; a measured row replaces a prediction in its slot."""
        return (self.gate, self.criterion, self.op, self.shapes, self.dtype, self.chip, self.implementation)

    @property
    def is_timing(self) -> bool:
        return self.method == "measured" and self.unit == "s" and self.value is not None

    @property
    def timing_method(self) -> str | None:
        """How a measured time was taken; a row written before rows said so is read as wall-calls."""
        if not self.is_timing:
            return None
        return self.timed_by or ASSUMED_TIMING

    @property
    def timing_assumed(self) -> bool:
        """A measured time whose method is assumed, not said (a schema 2 row)."""
        return self.is_timing and self.timed_by is None

    def to_json(self) -> str:
        row = dataclasses.asdict(self)
        row["shapes"] = [list(s) for s in self.shapes]
        for name in ("samples", "ratio_ci", "ops", "input_seeds"):
            if row[name] is not None:
                row[name] = list(row[name])
        return json.dumps(row, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, row: dict) -> Record:
        if not isinstance(row, dict):
            raise ValueError(f"a row is a JSON object, got {type(row).__name__}")
        version = row.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ValueError(f"schema_version {version!r}, expected "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(row) - names
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        try:
            return cls(**row)
        except TypeError as error:  # a required field is missing, or a wrongly typed one
            raise ValueError(str(error)) from None


_NUMBER = (int, float)
_FIELD_TYPES = {
    "criterion": str, "chapter": str, "test_id": str, "tree": str, "op": str, "dtype": str, "chip": str,
    "statistic": str, "unit": str, "platform": str, "device_kind": str, "interpret": bool, "run_id": str,
    "spread": _NUMBER + (type(None),), "ratio_to_floor": _NUMBER + (type(None),),
    "ratio_to_ceiling": _NUMBER + (type(None),), "ratio_to_compute_alone": _NUMBER + (type(None),),
    "cost": (dict, type(None)), "date": str, "jax": str, "jaxlib": str, "libtpu": (str, type(None)),
    "git_commit": (str, type(None)), "git_dirty": (bool, type(None)), "modules": dict, "notes": str,
    "id": str, "rehearsal": bool, "timed_by": (str, type(None)), "wall_per_call": _NUMBER + (type(None),),
    "dispatch_bound": (bool, type(None)), "schema_version": int, "calls_per_sample": (int, type(None)),
    "sized_by": (str, type(None)), "ops": (tuple, type(None)), "mxu": (dict, type(None)),
    "xla_regime": (str, type(None)), "input_seeds": (tuple, type(None)),
}


def _is_seconds(value) -> bool:
    """A finite number >= 0 (seconds, FLOPs or a share), not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def check_public_url(url) -> str:
    """A public link is an https URL with a host and no spaces; anything else is refused."""
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme != "https" or not parsed.netloc or any(c.isspace() for c in url):
        raise ValueError(f"a public link is an https:// URL, got {url!r}")
    return url


def link_record(url: str, *, gate: int, criterion: str, chapter: str, tree: str = "exercises",
                notes: str = "") -> Record:
    """The row `tpucourse records link` writes: a public link, self-reported, never a speed."""
    return Record(gate=gate, criterion=criterion, chapter=chapter, test_id="tpucourse records link",
                  tree=tree, implementation="kernel", op="public-link", shapes=(), dtype="", chip="",
                  method="self-reported", statistic=PUBLIC_LINK, value=check_public_url(url), unit="url",
                  verdict="pass", platform="", device_kind="", interpret=False, notes=notes)


def recorded_link(gate: int, near) -> str | None:
    """The latest public link `tpucourse records link` recorded for `gate` in the records of
    the checkout holding `near` (a path inside it), or None."""
    from ..core.course import find_course_root

    root = find_course_root(Path(near).resolve())
    if root is None:
        return None
    links = [r.record.value for r in read(root / DEFAULT_PATH).rows
             if r.record.gate == gate and r.record.statistic == PUBLIC_LINK]
    return links[-1] if links else None


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def is_rehearsal_file(path) -> bool:
    return Path(path).name.endswith(REHEARSAL_SUFFIX)


def append(path, record: Record) -> None:
    """Append one row: one write() under an exclusive lock, then fsync.

    A rehearsal row goes only to a rehearsal file, and a rehearsal file takes nothing else.
    Rows of an older schema are read, never written.
    """
    if record.schema_version != SCHEMA_VERSION:
        raise ValueError(f"{record.test_id}: rows are written in schema {SCHEMA_VERSION}, "
                         f"not {record.schema_version}")
    if record.rehearsal != is_rehearsal_file(path):
        raise HonestyError(
            f"{record.test_id}: a rehearsal row goes only to a *{REHEARSAL_SUFFIX} file, never to {path}"
            if record.rehearsal else
            f"{record.test_id}: {path} is a rehearsal's throwaway file; only rehearsal rows go there")
    append_line(path, record.to_json())


@dataclass(frozen=True)
class Located:
    """A row and where it was read from."""

    record: Record
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class BadLine:
    """A line no reader can use: torn, not JSON, not a row, or a repeated row id."""

    path: Path
    line: int
    reason: str
    text: bytes

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class Readout:
    rows: tuple[Located, ...]
    bad: tuple[BadLine, ...]

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.rows]

    def __add__(self, other: Readout) -> Readout:
        return Readout(self.rows + other.rows, self.bad + other.bad)


EMPTY = Readout((), ())


def read(path) -> Readout:
    """Every row of a records file that parses, and every line that does not (path:line, why)."""
    path = Path(path)
    try:
        data = read_bytes(path, MAX_BYTES)
    except UnreadableFile as error:  # a directory, a device, far too big: one line, and the run goes on
        return Readout((), (BadLine(path, 0, str(error).removeprefix(f"{path} "), b""),))
    if data is None:
        return EMPTY
    lines = data.split(b"\n")
    rows, bad, seen = [], [], set()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if number == len(lines):
            bad.append(BadLine(path, number, "the last line has no newline: a write was cut short", raw))
            continue
        try:
            record = Record.from_dict(untrusted_json.loads(raw, depth=ROW_DEPTH))
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError and JsonError are ValueErrors
            bad.append(BadLine(path, number, f"not a valid row: {_short(error)}", raw))
            continue
        if record.id in seen:
            bad.append(BadLine(path, number, f"row id {record.id} appears twice", raw))
            continue
        seen.add(record.id)
        rows.append(Located(record, path, number))
    return Readout(tuple(rows), tuple(bad))


def side_file(path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIDE_SUFFIX)


def repair(path) -> list[BadLine]:
    """Move every bad line of a records file to its side file; keep every row that parses.

    Nothing is deleted: a bad line goes to `<file>.bad-lines.jsonl` with its line number and
    why, before the records file is replaced (under its lock, by rename) without it.
    """
    path = Path(path)
    with locked(path):
        readout = read(path)
        if not readout.bad:
            return []
        side = side_file(path)
        with open(side, "a", encoding="utf-8") as out:
            for b in readout.bad:
                out.write(json.dumps({"file": path.name, "line": b.line, "why": b.reason,
                                      "text": b.text.decode("utf-8", "backslashreplace")}) + "\n")
            out.flush()
            os.fsync(out.fileno())
        bad_numbers = {b.line for b in readout.bad}
        kept = [raw for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1)
                if raw.strip() and number not in bad_numbers]
        temporary = path.with_name(path.name + ".repairing")
        with open(temporary, "wb") as out:
            out.write(b"".join(raw + b"\n" for raw in kept))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    return list(readout.bad)


def _short(error: Exception, limit: int = 200) -> str:
    text = str(error)
    return text if len(text) <= limit else text[:limit] + "..."


def _one_of(what: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
