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

A ceiling's candidates are a `Space`: named axes of knobs (block sizes, a sub-block, the fused backward on
or off), a limit saying which knobs are out of it (a block past the sequence, a footprint past the chip's
scoped VMEM) and the candidates tried first. `search` times those, then keeps timing the untried
neighbours of the fastest, one step along each axis, until every neighbour of the choice has been timed
or is out of the space, or `Space.budget` candidates have been tried: a choice at the edge of what was
tried extends the search past that edge, and the result says, axis by axis, where the choice sits
(`Searched.placement`: interior, or at an edge and why). A kept sweep of a space is matched by the
space's identity (its axes and their values), not by a list of candidates.

A rehearsal keeps its sweeps in a throwaway file of its own (REHEARSAL_NAME, beside its rows): a
choice made on the stand-in clock is never read by a run on the chip, and its lines say
`rehearsal` (`kept` refuses one from a file that is not a rehearsal's).
"""

from __future__ import annotations

from collections.abc import Callable
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
    space: str = ""  # a searched space's identity (Space.identity); "" for a fixed list of candidates
    choice: dict = field(default_factory=dict)  # the knobs of `best`, for a searched space
    placement: str = ""  # where the choice sits in its space (Searched.placement)

    def describe(self) -> str:
        """The sweep as a ceiling row's notes quote it: each candidate's time, the choice, the date."""
        times = "; ".join(f"{label}: {seconds * 1e6:.1f} us" for label, seconds in self.times.items())
        if self.space:  # the choice and where it sits first: a row's notes are cut at 1000 characters
            return (f"chose {self.best} ({self.placement}), searched {self.date[:10]} over {len(self.candidates)} "
                    f"configurations ({times})")
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
                        notes=row.get("notes", ""), date=row["date"], rehearsal=bool(row.get("rehearsal", False)),
                        space=str(row.get("space", "")), choice=dict(row.get("choice", {})),
                        placement=str(row.get("placement", "")))
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
    """The latest sweep kept for `key` over exactly these candidates (a Space: over this space), or None
    (sweep on the chip).

    A different candidate list (a block size added or dropped) or space is a new sweep; a file that is not
    a rehearsal's never hands out a rehearsal's sweep, nor a rehearsal's file another's.
    """
    rehearsal = is_rehearsal_file(path)
    sweeps, _ = read(path)
    if isinstance(candidates, Space):
        same = lambda s: s.space == candidates.identity() and bool(s.choice)  # noqa: E731
    else:
        same = lambda s: not s.space and set(s.candidates) == set(candidates)  # noqa: E731
    matching = [s for s in sweeps if s.key == key and same(s) and s.rehearsal == rehearsal]
    return max(enumerate(matching), key=lambda pair: (pair[1].date, pair[0]))[1] if matching else None


# ---------------------------------------------------------------- searching a space of knobs


@dataclass(frozen=True)
class Axis:
    """One knob of a space and every value it may take, in order (the search steps between neighbours)."""

    name: str
    values: tuple
    end: str = ""  # why the values stop where they do ("the sequence"): said when the choice is the last

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(self.values))


@dataclass(frozen=True)
class Space:
    """A ceiling's tuning space: its axes, the timed step of a choice of knobs, and which choices are out."""

    name: str  # what is tuned: "JAX flash attention"
    axes: tuple[Axis, ...]
    build: Callable[[dict], Callable]  # knobs -> the function timed
    start: tuple[dict, ...]  # tried first: the kernel's defaults, known good blocks (the course solution's)
    limit: Callable[[dict], str | None] = lambda knobs: None  # why knobs are out of the space, or None
    budget: int = 16  # at most this many candidates timed by one search
    edge: str = ""  # how the space is bounded beyond its axes, where that changed what a search could reach
    _built: dict = field(default_factory=dict, compare=False, repr=False)  # label -> function (`function`)

    def function(self, knobs: dict) -> Callable:
        """build(knobs), built once per configuration: the same jitted function each time it is timed or
        compiled ahead, so its program compiles once."""
        label = self.label(knobs)
        if label not in self._built:
            self._built[label] = self.build(knobs)
        return self._built[label]

    def label(self, knobs: dict) -> str:
        """q512-kv2048-k512; a boolean knob shows by name when on (-fused), not at all when off."""
        parts = []
        for axis in self.axes:
            value = knobs[axis.name]
            if isinstance(value, bool):
                parts += [axis.name] if value else []
            else:
                parts.append(f"{axis.name}{value}")
        return "-".join(parts)

    def identity(self) -> str:
        """What a kept sweep of this space must match: the name, every axis and its values, its edge rule."""
        axes = f"{self.name}: " + "; ".join(f"{a.name} in {list(a.values)}" for a in self.axes)
        return f"{axes}; {self.edge}" if self.edge else axes

    def out_of_space(self, knobs: dict) -> str | None:
        for axis in self.axes:
            if knobs[axis.name] not in axis.values:
                return f"{axis.name} {knobs[axis.name]} is none of {list(axis.values)}"
        return self.limit(knobs)

    def neighbours(self, knobs: dict):
        """(axis, direction, knobs one step along it, or None past the axis's last value)."""
        for axis in self.axes:
            at = axis.values.index(knobs[axis.name])
            for direction, to in (("down", at - 1), ("up", at + 1)):
                yield axis, direction, ({**knobs, axis.name: axis.values[to]} if 0 <= to < len(axis.values) else None)


@dataclass(frozen=True)
class Searched:
    """A search's result: every candidate tried, the times of those timed, the choice and where it sits."""

    tried: dict  # label -> knobs, in the order tried
    times: dict  # label -> median seconds of its latest timing
    best: str | None
    edges: tuple[str, ...]  # per axis where the choice is at an edge: "block_q up: why it stopped there"
    unfinished: tuple[str, ...]  # edges not explored because the budget was spent
    failed: dict  # label -> why it was wrong or failed

    @property
    def interior(self) -> bool:
        return self.best is not None and not self.edges and not self.unfinished

    @property
    def placement(self) -> str:
        if self.best is None:
            return "no candidate was correct"
        if self.interior:
            return "interior: every neighbour along every axis timed slower"
        words = [f"at its edge, {e}" for e in self.edges]
        words += [f"NOT interior, {e} untried (budget of candidates spent)" for e in self.unfinished]
        return "; ".join(words)


def search(space: Space, measure: Callable[[dict], dict], earlier: Sweep | None = None) -> Searched:
    """Time the space's start, then the untried neighbours of the fastest, until none is left or the budget is spent.

    measure({label: fn}) -> {label: median seconds} times the correct ones among them (a wrong or failing
    candidate is left out and, with why, reported in the mapping under the key (label, "failed")). Each
    round times the current choice again beside its neighbours, so a choice is compared in one round.
    earlier: a kept search of this space to continue (`continued`): its candidates are not tried again,
    its choice is timed again beside the neighbours it left untried, with a budget of candidates of its own.
    """
    tried, times, failed = {}, {}, {}
    batch = [k for k in space.start if space.out_of_space(k) is None]
    best = None
    if earlier is not None:
        tried, times, failed = continued(earlier)
        best = earlier.best
        batch = [n for _, _, n in space.neighbours(tried[best]) if n is not None and space.out_of_space(n) is None]
    before = len(tried)
    while True:
        todo = {}
        for knobs in batch:
            label = space.label(knobs)
            if label not in tried and label not in todo and len(tried) - before + len(todo) < space.budget:
                todo[label] = knobs
        if not todo:
            break
        tried.update(todo)
        fns = {label: space.function(knobs) for label, knobs in todo.items()}
        if best is not None:
            fns[best] = space.function(tried[best])
        got = measure(fns)
        for label in todo:
            if label not in got:
                failed[label] = got.get((label, "failed"), "wrong or failed")
        times.update({label: t for label, t in got.items() if isinstance(label, str)})
        if not times:
            return Searched(tried, times, None, (), (), failed)
        # (a continued search's earlier candidates, known by label alone, keep their times but are not chosen:
        # their knobs were not kept, and their times are another run's)
        best = min((label for label in times if tried.get(label) is not None), key=times.get)
        batch = [n for _, _, n in space.neighbours(tried[best]) if n is not None and space.out_of_space(n) is None]
    edges, unfinished = [], []
    for axis, direction, neighbour in space.neighbours(tried[best]):
        if len(axis.values) == 1 or (neighbour is None and isinstance(axis.values[0], bool)):
            continue  # an on/off knob has no inside: both settings timed is all there is
        if neighbour is None:
            last = "its smallest value" if direction == "down" else (axis.end or "its largest value")
            edges.append(f"{axis.name} {direction}: {last}, {tried[best][axis.name]}")
            continue
        why = space.out_of_space(neighbour)
        label = space.label(neighbour)
        if why is not None:
            edges.append(f"{axis.name} {direction}: {why}")
        elif label in failed:
            edges.append(f"{axis.name} {direction}: {label} failed ({failed[label]})")
        elif label not in times:
            unfinished.append(f"{axis.name} {direction} ({label})")
    return Searched(tried, times, best, tuple(edges), tuple(unfinished), failed)


def continued(earlier: Sweep) -> tuple[dict, dict, dict]:
    """(tried, times, failed) of a kept search, as `search` holds them: every candidate it tried (the
    choice with its knobs, the others by label alone: they are not tried again), the times it measured
    and the failures its notes name ("label: why; ...")."""
    tried = {label: None for label in earlier.candidates}
    tried[earlier.best] = dict(earlier.choice)
    failed = {}
    for part in filter(None, earlier.notes.split("; ")):
        label, _, why = part.partition(": ")
        if label in tried and label not in earlier.times:
            failed[label] = why
    return tried, dict(earlier.times), failed


def unfinished(sweep: Sweep) -> bool:
    """Whether a kept search stopped with a neighbour of its choice untried (its budget spent)."""
    return bool(sweep.space) and "untried (budget of candidates spent)" in sweep.placement
