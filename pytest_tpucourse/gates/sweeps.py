"""Ceiling sweeps kept between runs: the block sizes a sweep on the chip found fastest, so a later run
times only those.

A gate whose ceiling is a sweep of candidates (gate 03: JAX's flash attention at four block sizes)
would otherwise compile and time every candidate at every slot in every run. After a sweep on the
chip its result is kept, one JSON line in .tpucourse/ceiling-sweeps.jsonl: the candidates, each
one's median time, the fastest, the date, keyed by what decides the fastest (`SweepKey`: the chip
and its device kind, JAX's, jaxlib's and libtpu's versions, the gate, the op, which names the
causal and backward variant, the shapes and the dtype). A later run over the same candidates takes
the kept choice and times only it, in the trio's interleaved rounds with the floor and the kernel,
checked before and after timing like every ceiling: only the choice is reused, never a time, and
the ceiling row's notes say which sweep it came from. `pytest --gates --resweep` sweeps again.

Where a run has kept no sweep of its own for a key, the course's sweeps are read next:
bench/tpu/ceiling-sweeps.jsonl, made by the course's own gate runs on the chips it was measured on
(bench/device_runs.py adds the sweeps each such run kept). The key holds the device kind and every
version, so a learner's first gate run on the same chip and versions takes the course's choice
instead of compiling and timing every candidate; on any other chip or version it sweeps as before.
Only the choice is reused, checked for correctness and timed in the learner's own rounds.

A rehearsal keeps its sweeps in a throwaway file of its own (REHEARSAL_NAME, beside its rows): a
choice made on the stand-in clock is never read by a run on the chip, and its lines say
`rehearsal` (`kept` refuses one from a file that is not a rehearsal's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import json_lines
from .records import utc_now

PATH = Path(".tpucourse") / "ceiling-sweeps.jsonl"  # under the course root
COURSE_PATH = Path("bench") / "tpu" / "ceiling-sweeps.jsonl"  # the course's own sweeps on the chip, in its repo
REHEARSAL_NAME = "ceiling-sweeps.rehearsal.jsonl"  # a rehearsal's, beside its throwaway rows


@dataclass(frozen=True)
class SweepKey:
    """What decides which candidate is fastest: where it ran, with what, on which problem."""

    chip: str
    device_kind: str
    jax: str
    jaxlib: str
    libtpu: str | None
    gate: int
    op: str  # names the variant: attention-causal-fwd-bwd is causal and timed with its backward
    shapes: tuple[tuple[int, ...], ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shapes", tuple(tuple(int(d) for d in s) for s in self.shapes))


@dataclass(frozen=True)
class Sweep:
    """One sweep's result on the chip."""

    key: SweepKey
    candidates: tuple[str, ...]  # every label swept, correct or not
    times: dict  # label -> median seconds per call, for the correct candidates timed
    best: str
    notes: str = ""  # the candidates that were wrong or failed, and why
    date: str = field(default_factory=utc_now)
    rehearsal: bool = False

    def describe(self) -> str:
        """The sweep as a ceiling row's notes quote it: each candidate's time, the choice, the date."""
        times = "; ".join(f"{label}: {seconds * 1e6:.1f} us" for label, seconds in self.times.items())
        return f"swept {self.date[:10]} over {len(self.candidates)} block sizes ({times}), chose {self.best}"

    def to_json(self) -> str:
        import json

        row = asdict(self)
        row["key"]["shapes"] = [list(s) for s in self.key.shapes]
        row["candidates"] = list(self.candidates)
        return json.dumps(row, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, row: dict) -> Sweep:
        try:
            key = SweepKey(**row["key"])
            sweep = cls(key=key, candidates=tuple(row["candidates"]), times=dict(row["times"]), best=row["best"],
                        notes=row.get("notes", ""), date=row["date"], rehearsal=bool(row.get("rehearsal", False)))
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a kept sweep: {error}") from None
        if not (isinstance(sweep.best, str) and sweep.best in sweep.candidates and sweep.best in sweep.times
                and all(isinstance(v, (int, float)) and v > 0 for v in sweep.times.values())):
            raise ValueError("not a kept sweep: its best is not among its timed candidates")
        return sweep


def path_for(course_root: Path, rehearsal_rows: Path | None) -> Path:
    """Where a run keeps its sweeps: beside a rehearsal's throwaway rows, else in the course's .tpucourse/."""
    return Path(rehearsal_rows).with_name(REHEARSAL_NAME) if rehearsal_rows is not None else Path(course_root) / PATH


def course_path_for(course_root: Path, rehearsal_rows: Path | None) -> Path | None:
    """The course's own sweeps, read after a run's own: never by a rehearsal, whose choices are its own."""
    return None if rehearsal_rows is not None else Path(course_root) / COURSE_PATH


def is_rehearsal_file(path) -> bool:
    return Path(path).name == REHEARSAL_NAME


def keep(path, sweep: Sweep) -> None:
    """Append a sweep's result; a rehearsal's only to a rehearsal's file, and nothing else there."""
    if sweep.rehearsal != is_rehearsal_file(path):
        raise ValueError(f"a rehearsal's sweep is kept only in its {REHEARSAL_NAME}, and nothing else is kept there")
    json_lines.append_line(path, sweep.to_json())


def read(path) -> tuple[list[Sweep], list[json_lines.BadObjectLine]]:
    """Every sweep kept in `path`, and every line that is not one (path:line, why)."""
    found, bad = json_lines.read_objects(path, Sweep.from_dict)
    return [sweep for _, sweep in found], bad


def kept(path, key: SweepKey, candidates) -> Sweep | None:
    """The latest sweep kept for `key` over exactly these candidates, or None (sweep on the chip).

    A different candidate list (a block size added or dropped) is a new sweep; a file that is not a
    rehearsal's never hands out a rehearsal's sweep, nor a rehearsal's file another's.
    """
    rehearsal = is_rehearsal_file(path)
    sweeps, _ = read(path)
    matching = [s for s in sweeps if s.key == key and set(s.candidates) == set(candidates)
                and s.rehearsal == rehearsal]
    return max(enumerate(matching), key=lambda pair: (pair[1].date, pair[0]))[1] if matching else None
