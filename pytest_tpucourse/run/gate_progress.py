"""A gate run's progress and its time: a line as each gate finishes, each gate's time in the closing
table, and, for the course's own solutions on an accelerator, a `gates` line in bench/device_runs.jsonl.

A gate run on the chip is long (compiles, warm-ups, interleaved rounds), so each gate says when it
is done: `gate 03: 10 tests, 8 slots timed, 2m11s`. A gate's time is the sum of its tests' setup,
call and teardown durations, as pytest reports them; a slot is timed when a measurement of it was
judged on timings (gates/run.py's GateResult.timed). Under pytest-xdist the controller sees the
reports but not the collection, so it prints no per-gate line; the closing table still has the times.

`--device-runs PATH` puts the line elsewhere (a machine the tree was copied to, whose files come
back from one folder), `--device-runs none` nowhere.

`GateProgress` is an object registered with the session when `--gates` is given (plugin.py), as
ReportCounter is: pytest calls `pytest_runtest_logreport` with the report alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..core.paths import shown
from ..gates import device_runs, markers
from ..gates.criteria import gate as gate_of
from ..gates.report import duration


@dataclass
class GateTally:
    """One gate's (or chapter's) tests so far: outcomes, timed slots, seconds."""

    tests: set = field(default_factory=set)
    outcomes: dict = field(default_factory=dict)  # node id -> passed, failed, todo or skipped
    timed: int = 0
    seconds: float = 0.0

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def progress_line(number: int, tally: GateTally) -> str:
    timed = f"{tally.timed} slot{'s' if tally.timed != 1 else ''} timed" if tally.timed else "nothing timed"
    others = ", ".join(f"{n} {o}" for o in ("failed", "todo", "skipped") if (n := tally.count(o)))
    return (f"gate {number:02d}: {len(tally.tests)} test{'s' if len(tally.tests) != 1 else ''}, {timed}"
            f"{', ' + others if others else ''}, {duration(tally.seconds)}")


class GateProgress:
    """Tallies the gate tests' reports; says when each gate is done; writes the device-run line."""

    def __init__(self, session, config: pytest.Config):
        self.session = session
        self.config = config
        self.started = time.monotonic()
        self.expected: dict[int, set] = {}  # gate -> node ids collected (a plain run)
        self.finished: set = set()
        self.gates: dict[int, GateTally] = {}
        self.chapters: dict[str, GateTally] = {}
        self.said: set = set()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            number = markers.gate_number(item)
            if number is not None:
                self.expected.setdefault(number, set()).add(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        number = getattr(report, "tpucourse_gate", None)
        if number is None:
            return
        chapter = gate_of(number).chapter
        for tally in (self.gates.setdefault(number, GateTally()), self.chapters.setdefault(chapter, GateTally())):
            tally.tests.add(report.nodeid)
            tally.seconds += report.duration
            tally.timed += getattr(report, "tpucourse_timed", 0)
            if report.failed:  # a stub's test is TODO, not a failure (reports.py)
                tally.outcomes[report.nodeid] = "todo" if getattr(report, "tpucourse_todo", False) else "failed"
            elif report.skipped and tally.outcomes.get(report.nodeid) != "failed":
                tally.outcomes[report.nodeid] = "skipped"
            elif report.when == "call" and report.passed:
                tally.outcomes[report.nodeid] = "passed"

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.finished.add(nodeid)
        for number, expected in self.expected.items():
            if number not in self.said and expected <= self.finished and number in self.gates:
                self.said.add(number)
                reporter = self.config.pluginmanager.get_plugin("terminalreporter")
                if reporter is not None:
                    reporter.write_line(progress_line(number, self.gates[number]))

    def seconds_per_gate(self) -> dict[int, float]:
        return {number: tally.seconds for number, tally in self.gates.items()}

    # ------------------------------------------------------------ bench/device_runs.jsonl

    def device_run(self) -> device_runs.DeviceRun | None:
        """The `gates` line of this run, when it is one the course keeps: its own solutions, natively on
        an accelerator (not a rehearsal, not an interpreter), with some gate test reported."""
        run = self.session
        gates, options = run.gates, run.options
        if not (options.solutions and gates.on_accelerator and gates.rehearsal is None
                and not gates.interpret_requested and self.gates):
            return None
        from ..gates.provenance import checkout_commit, libtpu_version
        from ..gates.records import utc_now

        commit, dirty, _ = checkout_commit(run.course.root)
        return device_runs.DeviceRun(
            date=utc_now(), device_kind=gates.device_kind, jax=run.backend.jax_version, libtpu=libtpu_version(),
            commit=device_runs.commit_label(commit, dirty), kind=device_runs.GATES,
            seconds=round(time.monotonic() - self.started, 3),
            stopped="interrupted" if run.exitstatus == pytest.ExitCode.INTERRUPTED else None,
            chapters={chapter: {"passed": t.count("passed"), "failed": t.count("failed"),
                                "skipped": t.count("skipped"), "seconds": round(t.seconds, 3)}
                      for chapter, t in sorted(self.chapters.items())})

    def write_device_run(self) -> str | None:
        """Append this run's `gates` line to bench/device_runs.jsonl; what to say about it, or None."""
        asked = self.session.options.device_runs
        line = None if asked == "none" else self.device_run()
        if line is None:
            return None
        root = self.session.course.root
        path = Path(asked) if asked else root / device_runs.PATH
        named = shown(path, root)
        try:
            device_runs.append(path, line)
        except OSError as error:
            return f"this gate run's line could not be added to {named} ({error.strerror or error})"
        return f"this gate run's line added to {named} ({duration(line.seconds)} on {line.device_kind})"
