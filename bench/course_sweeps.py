"""bench/tpu/ceiling-sweeps.jsonl: the ceiling sweeps the course's own gate runs made on a chip, which a
learner's gate run on the same chip kind and versions reuses (the choice only: gates/sweeps.py).

    python bench/course_sweeps.py add .tpucourse/ceiling-sweeps.jsonl        the sweeps a gate run kept
    python bench/course_sweeps.py from-records bench/records.jsonl           sweeps quoted by measured rows
    python bench/course_sweeps.py show                                       what the file holds

A gate's ceiling is a space searched on the chip (gates/ceilings.py, gates/sweeps.py `search`): a kept
line holds the space's identity, every configuration tried with its time, the choice's knobs and where
it sits in the space (interior, or at which edge and why). To search every slot again on a chip and
replace the course's lines:

    : > bench/tpu/ceiling-sweeps.jsonl
    python bench/device_runs.py --kinds gates --commit $(git rev-parse HEAD)    searches, then `add`s them
    python bench/course_sweeps.py show                                          each choice and its place

`add` takes the sweeps of a run on an accelerator (bench/device_runs.py calls it after its gate run);
`from-records` recovers a sweep from the notes of a measured ceiling row ("ceiling tuned over N block
sizes (label: t us; ...): chose label"), for gate runs made before their sweeps were kept. Neither takes
a rehearsal's sweep, one from a CPU, or one the file already holds.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_tpucourse.gates import records as rec  # noqa: E402
from pytest_tpucourse.gates import sweeps  # noqa: E402

COURSE = REPO / sweeps.COURSE_PATH
_TUNED = re.compile(r"ceiling tuned over (\d+) block sizes \((.*?)\): chose (\S+)")
_TIME = re.compile(r"^(\S+): ([0-9.]+) us$")


def from_row(row: rec.Record) -> sweeps.Sweep | None:
    """The sweep a measured ceiling row quotes in its notes, or None (a row that swept nothing, or
    whose sweep named a candidate that failed: its full candidate list is not in the notes)."""
    found = _TUNED.search(row.notes or "")
    if not (found and row.implementation == "ceiling" and row.method == "measured" and not row.interpret
            and row.platform != "cpu" and row.rehearsal is False):
        return None
    times = {}
    for part in found.group(2).split("; "):
        timed = _TIME.match(part)
        if timed is None:
            return None
        times[timed.group(1)] = float(timed.group(2)) * 1e-6
    if len(times) != int(found.group(1)):
        return None
    key = sweeps.SweepKey(chip=row.chip, device_kind=row.device_kind, jax=row.jax, jaxlib=row.jaxlib,
                          libtpu=row.libtpu, gate=row.gate, op=row.op, shapes=row.shapes, dtype=row.dtype)
    return sweeps.Sweep(key=key, candidates=tuple(times), times=times, best=found.group(3), date=row.date,
                        notes=f"from the measured ceiling row of run {row.run_id} ({row.test_id})")


def _worth_keeping(sweep: sweeps.Sweep) -> bool:
    return not sweep.rehearsal and sweep.key.device_kind.lower() != "cpu"


def add(found: list[sweeps.Sweep], path: Path = COURSE) -> list[sweeps.Sweep]:
    """Append the sweeps not yet held (by key, candidates and date); the ones appended."""
    held, _ = sweeps.read(path) if path.exists() else ([], [])
    seen = {(s.key, frozenset(s.candidates), s.date) for s in held}
    added = []
    for sweep in found:
        mark = (sweep.key, frozenset(sweep.candidates), sweep.date)
        if _worth_keeping(sweep) and mark not in seen:
            path.parent.mkdir(parents=True, exist_ok=True)
            sweeps.keep(path, sweep)
            seen.add(mark)
            added.append(sweep)
    return added


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("add", "from-records", "show"))
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--to", type=Path, default=COURSE)
    args = parser.parse_args(argv)
    if args.what == "show":
        for sweep in sweeps.read(args.to)[0]:
            print(f"gate {sweep.key.gate:02d} {sweep.key.op} {sweep.key.shapes[0]} on {sweep.key.device_kind} "
                  f"(jax {sweep.key.jax}, libtpu {sweep.key.libtpu}): {sweep.describe()}")
        return 0
    found = []
    for path in args.paths:
        if args.what == "add":
            kept, bad = sweeps.read(path)
            found += kept
        else:
            rows = rec.read(path)
            kept = [s for s in map(from_row, rows.records) if s is not None]
            found += kept
            bad = []
        for line in bad:
            print(f"{path}: {line}", file=sys.stderr)
    added = add(found, args.to)
    print(f"{len(added)} sweep{'s' if len(added) != 1 else ''} added to {args.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
