"""`pytest --gates --rehearse`: every gate test's measuring path, run through on any machine.

A TPU hour is the wrong place to find that a gate test raises. A rehearsal runs each gate
test as it would run on the chip: inputs built at the timed shapes (or smaller ones the
test names for a CPU, said in the output), the timed outputs checked against the floor,
the learner's kernel checked as their own work and, on a CPU, compiled for the chip at the
timed shapes with its own blocks by the real compiler (chip_compile.py: what the chip would
refuse, scoped VMEM above all, fails the test), the harness's warm-up and interleaved
rounds, rows built and re-judged. Only the clock is a stand-in: every call of every
implementation "takes" STAND_IN_CALL_SECONDS on it, so its samples and verdicts say nothing
about any chip.

Its rows are marked `rehearsal` and go to a throwaway file of their own
(`<tmp>/tpucourse-*/gates.rehearsal.jsonl`): records.append refuses them anywhere else, and
every reader (the gate table, `tpucourse progress`, `tpucourse bench`, `records check`)
rejects them (judge.py). The run prints, per gate test, "ran through" or the error with the
test, file and line; a verdict judged on the stand-in clock is not an error.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import chips
from . import criteria, judge, timer
from . import records as rec
from .run import NOTHING_TIMED

STAND_IN_CALL_SECONDS = 0.1  # one call of any implementation on the stand-in clock
STAND_IN_TICK = 1e-6  # each reading of the stand-in clock moves it on by this much


class StandInClock:
    """A clock that moves only when read (a tick) and when a timed implementation is called."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += STAND_IN_TICK
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class StandInHarness(timer.Harness):
    """The real harness (warm-up, calls per sync, interleaved rotating rounds, the stopping
    rule) on the stand-in clock: every implementation is really called, and every call
    counts STAND_IN_CALL_SECONDS. With the harness's own settings that makes three warm-up
    calls and one call per sample."""

    def __init__(self):
        self.stand_in = StandInClock()
        super().__init__(clock=self.stand_in)

    def measure(self, fns: dict, input_sets: list[tuple]) -> dict[str, timer.Timing]:
        def counted(fn):
            def call(*args):
                out = fn(*args)
                self.stand_in.advance(STAND_IN_CALL_SECONDS)
                return out
            return call
        return super().measure({name: counted(fn) for name, fn in fns.items()}, input_sets)


class KeptFromBenchmark:
    """The run's store, checked as on the chip (pytest-benchmark must be on) but handed no
    timing: pytest-benchmark's table and files would show the stand-in clock as times."""

    def __init__(self, store):
        self._store = store

    def require(self) -> None:
        self._store.require()

    def store(self, label, timing) -> None:
        pass


def throwaway_path() -> Path:
    """A fresh file for a rehearsal's rows, outside the course: nothing reads it afterwards."""
    return Path(tempfile.mkdtemp(prefix="tpucourse-")) / f"gates{rec.REHEARSAL_SUFFIX}"


def test_outcome(results) -> tuple[str, str] | None:
    """A rehearsed gate test's outcome: it fails on an error in its path (a failed check, a
    wrong timed output, a kernel that is not the learner's), or when its path stopped short of
    timing (awaiting hardware, not runnable); a verdict of the stand-in clock is no error."""
    errors = [r.message for r in results if r.status == criteria.FAIL and not r.timed]
    if errors:
        return "failed", "\n".join(errors)
    short = [r.message for r in results if r.status in (criteria.AWAITING, criteria.NOT_RUNNABLE, NOTHING_TIMED)]
    if short:
        return "failed", "did not run through: " + "; ".join(dict.fromkeys(short))
    return None


@dataclass
class Rehearsal:
    """One rehearsal: where its rows go, what each gate test scaled, how each ended."""

    path: Path = field(default_factory=throwaway_path)
    scaled: dict = field(default_factory=dict)  # test id -> ["timed shapes -> CPU shapes", ...]
    compiled: dict = field(default_factory=dict)  # test id -> ["compiled for v5e at ...: accepted", ...]
    ended: dict = field(default_factory=dict)  # test id -> line for the summary
    harness: StandInHarness = field(default_factory=StandInHarness)

    def note_scaled(self, test_id: str, text: str) -> None:
        self.scaled.setdefault(test_id, []).append(text)

    def note_compiled(self, test_id: str, text: str) -> None:
        self.compiled.setdefault(test_id, []).append(text)

    def header_line(self, chip: chips.Chip, device_kind: str) -> str:
        return (f"tpucourse: REHEARSAL of the gates for chip {chip.name} on {device_kind}: the measuring path "
                f"on a stand-in clock ({STAND_IN_CALL_SECONDS:g} s a call for every implementation), no "
                f"number about any chip; rows to {self.path} (marked rehearsal, thrown away)")

    def ended_report(self, report) -> None:
        """A gate test's ending: its call, or a setup or teardown that failed (or skipped it)."""
        if report.when == "call" or report.failed or (report.when == "setup" and report.skipped):
            if report.nodeid in self.ended and not report.failed:
                return
            self.ended[report.nodeid] = _ending(report)

    def summary_lines(self, registry, gates) -> list[str]:
        lines = ["rehearsal of the gates (stand-in clock: no number about any chip; nothing here is a result)"]
        for test_id, (status, detail) in self.ended.items():
            scaled = self.scaled.get(test_id)
            if status == RAN_THROUGH and scaled:
                detail = f" (shapes scaled for the CPU: {'; '.join(dict.fromkeys(scaled))})"
            lines.append(f"  {status:<11}  {test_id}{detail}")
            lines += [f"               the timed kernel {note}" for note in dict.fromkeys(self.compiled.get(test_id, ()))]
        readout = rec.read(self.path)
        judged = judge.judge_rows(readout.rows, registry, gates, rehearsal=True)
        lines.append(f"rehearsal rows: {len(readout.rows)} written to {self.path} (marked rehearsal; never read "
                     f"by progress or the gate table), re-judged as a chip's: {len(judged.accepted)} accepted, "
                     f"{len(judged.rejected)} rejected, {len(readout.bad)} unreadable")
        lines += [f"  {problem}" for problem in [str(b) for b in readout.bad] + [str(r) for r in judged.rejected]]
        through = sum(1 for status, _ in self.ended.values() if status == RAN_THROUGH)
        lines.append(f"rehearsal: {through}/{len(self.ended)} gate tests ran through")
        return lines


RAN_THROUGH = "ran through"


def _ending(report) -> tuple[str, str]:
    """("ran through", ""), ("skipped", ": why"), ("TODO", ": what is not written yet"), or
    ("ERROR", ": file:line: the error")."""
    if report.passed:
        return RAN_THROUGH, ""
    if getattr(report, "tpucourse_todo", False):  # a stub: the path stops where the learner has not written
        crash = getattr(report.longrepr, "reprcrash", None)
        text = (crash.message if crash is not None else str(report.longrepr)).strip()
        first = text.splitlines()[0] if text else "not written yet"
        return "TODO", f": {first.removeprefix('TODO: ')}"
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "skipped", f": {reason.removeprefix('Skipped: ')}"
    test_file, line, _ = report.location
    where = f"{test_file}:{(line or 0) + 1}"
    longrepr = report.longrepr
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", ())
    for entry in reversed(entries):
        loc = getattr(entry, "reprfileloc", None)
        if loc is not None and Path(loc.path).as_posix().endswith(test_file):
            where = f"{test_file}:{loc.lineno}"
            break
    crash = getattr(longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(longrepr)
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    raised = (f" (raised at {crash.path}:{crash.lineno})"
              if crash is not None and not Path(crash.path).as_posix().endswith(test_file) else "")
    return "ERROR", f": {where}: {first}{raised}"
