"""What the run says on the terminal: the header lines at its start and the closing summary.

The summary is the run's last word on progress: the problems it met (progress not saved,
plugins that count nothing as done, earlier runs that ended without their summary), the gate
table with --gates, and each exercise's status. Writing it ends the run's marker
(learner/run_markers.py): a run that never reaches this point is named by the next.
"""

from __future__ import annotations

import pytest

from ..core.course import EXERCISES, SOLUTIONS
from ..core.paths import shown, shown_in_text
from ..gates import report
from ..learner import run_markers, state
from . import host_cpu
from .session import SESSION, CourseSession


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION, None)
    return header_lines(session) if session is not None else []


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is None:
        return
    try:
        _summary(session, terminalreporter)
    finally:
        if session.marker is not None:
            run_markers.summary_written(session.course.root, session.marker)
            session.marker = None


def header_lines(session: CourseSession) -> list[str]:
    b = session.backend
    gates = session.gates
    lines = [
        f"tpucourse: grading {session.tree.describe(session.course.root)}",
        f"tpucourse: kernels run under {b.describe_mode}",
        f"tpucourse: backend {b.platform} ({b.device_kind}, {b.device_count} "
        f"device{'s' if b.device_count != 1 else ''}), jax {b.jax_version}, "
        f"jaxlib {b.jaxlib_version}, hypothesis profile {session.hypothesis_profile}, "
        f"compilation cache {session.jax_cache or 'off'}",
    ]
    if gates.rehearsal is not None:
        lines.append(gates.rehearsal.header_line(gates.chip, gates.device_kind))
    elif session.options.gates:
        if not gates.on_accelerator:
            where = "predicted only: nothing is timed off-chip"
        elif gates.interpret_requested:
            where = f"on {gates.device_kind}, but interpret mode: nothing is timed"
        else:
            where = f"measured on {gates.device_kind}"
        lines.append(f"tpucourse: gates for chip {gates.chip.name} ({where}); records "
                     f"{shown(gates.records_path, session.course.root)} (rows of {session.tree_label})")
        if gates.on_accelerator and gates.interpret_requested:
            lines.append(f"tpucourse: WARNING --interpret {session.options.interpret} on "
                         f"{gates.device_kind}: gate speed criteria are not timed in this run")
    if session.grading.native_tpu:
        lines.append("tpucourse: graded calls with float32 inputs at jax.default_matmul_precision('highest') (a TPU's "
                     "default computes an f32 product in one bf16 pass; docs/checking.md, Precision); gates timed "
                     "at the default")
    lines += [f"tpucourse: WARNING {run.describe()}" for run in session.unfinished]
    return lines


def _summary(session: CourseSession, terminalreporter) -> None:
    root, gates, options = session.course.root, session.gates, session.options
    if session.problem:
        terminalreporter.write_line(f"tpucourse: {session.problem}", red=True)
    if gates.rehearsal is not None:  # no status is read from a rehearsal's rows
        terminalreporter.write_sep("=", "tpucourse rehearsal")
        for line in gates.rehearsal.summary_lines(options.registry, gates.gates):
            terminalreporter.write_line(line)
        return
    if session.progress.run_not_counted:
        terminalreporter.write_line(f"tpucourse: this run counts nothing as done: {session.progress.run_not_counted}; "
                                    f"run without them (-p no:NAME, or remove the conftest hook)", red=True)
    for run in session.unfinished:
        terminalreporter.write_line(f"tpucourse: {run.describe()}", red=True)
    placed = host_cpu.summary_line(session)
    if placed:
        terminalreporter.write_line(placed)
    show_gates = options.gates and gates.chip is not None
    if not (session.progress.results or show_gates):
        return
    terminalreporter.write_sep("=", "tpucourse")
    label = session.tree_label
    loaded = report.load([gates.records_path], options.registry, tree=label, gates=gates.gates)
    for line in loaded.problems()[:20]:
        terminalreporter.write_line(f"gate records: {shown_in_text(line, root)}", red=True)
    if loaded.problems():
        terminalreporter.write_line(f"gate records: {len(loaded.problems())} bad lines or rejected rows, "
                                    f"not counted; see `tpucourse records check`", red=True)
    current = (report.current_modules(root, label)  # statuses follow the code
               if label in (EXERCISES, SOLUTIONS) else None)
    done = frozenset(g.number for g in gates.gates if report.passed_on(
        loaded.accepted, g.number, current=current, course_root=root, gates=gates.gates))
    passed = len(done)
    if show_gates:
        seconds = session.gate_progress.seconds_per_gate() if session.gate_progress is not None else {}
        for line in report.gate_table_lines(loaded.accepted, gates.chip.name, current=current,
                                            course_root=root, tree=label, gates=gates.gates, seconds=seconds):
            terminalreporter.write_line(line)
        if session.device_run_note:
            terminalreporter.write_line(f"tpucourse: {session.device_run_note}")
    learner_state = None
    if session.tree.is_learners and not session.problem:
        try:
            learner_state = state.read(root)
        except state.CorruptState as error:
            terminalreporter.write_line(f"tpucourse: {error}", red=True)
    for line in session.progress.summary_lines(session.tree.describe(root),
                                               learner_state=learner_state, learner_tree=session.tree.is_learners,
                                               gates_passed=passed, only_ran=options.gates,
                                               native_chip=session.chip if session.grading.native_tpu else None,
                                               gates_done=done):
        terminalreporter.write_line(line)
