"""Gate tests' side of a run: the `gate_run` and `roofline_prediction` fixtures, and the chip
and versions pytest-benchmark stores with each timing.

A gate test measures and records with the object `gate_run` gives it: predictions off-chip,
measurements on the chip (gates/run.py). Its results decide the test's outcome in its
report (reports.py): awaiting hardware and not runnable are skips, a failed criterion a
failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..core.outcomes import LearnerCodeError
from ..gates import markers, timer
from ..gates.criteria import gate
from ..gates.provenance import module_hashes, provenance
from ..gates.rehearsal import KeptFromBenchmark
from ..gates.run import GateRun
from ..grading import backend, unit_files
from ..grading.tree import Implementation
from ..learner import state
from .options import OPTIONS
from .session import GATE_RESULTS, SESSION, CourseSession, run_chip


@pytest.fixture
def gate_run(request: pytest.FixtureRequest):
    """Measures and records this @gate test: predictions off-chip, measurements on the chip.

    Its results decide the test's outcome in the report (pytest_runtest_makereport): awaiting
    hardware and not runnable are skips, a failed criterion a failure.
    """
    session = request.config.stash.get(SESSION, None)
    if request.node.get_closest_marker("gate") is None or session is None:
        pytest.fail("gate_run is for @pytest.mark.gate tests inside a course checkout", pytrace=False)
    run = _gate_run(session, request.node, request.path, timer.BenchmarkStore(request))
    request.node.stash[GATE_RESULTS] = run.results
    return run


@pytest.fixture
def roofline_prediction(request: pytest.FixtureRequest):
    """The prediction of this test's @pytest.mark.roofline(flops=..., bytes=...)."""
    prediction = markers.roofline_prediction(request.node, request.config.stash[OPTIONS].registry,
                                             run_chip(request.config))
    if prediction is None:
        pytest.fail("roofline_prediction needs @pytest.mark.roofline(flops=..., bytes=...)", pytrace=False)
    return prediction


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    import jax
    import jaxlib

    session = config.stash.get(SESSION, None)
    gates = session.gates if session is not None else None
    machine_info["tpucourse"] = {
        "chip": gates.chip.name if gates is not None and gates.chip is not None else None,
        "device_kind": gates.device_kind if gates is not None else None,
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
    }


def _gate_run(session: CourseSession, item: pytest.Item, path: Path, store) -> GateRun:
    """The object a @gate test measures and records with.

    Its thresholds and device are the ones captured when the run started; its rows carry
    the graded tree, and, when the test grades code (asks for `impl`), the sha256 of each
    module of the chapter it grades.
    """
    gates = session.gates
    if gates.chip is None:
        raise pytest.UsageError(f"{item.nodeid}: no chip for gate records: pass --chip")
    number = markers.gate_number(item)
    chapter = session.course.chapter_of_path(path)
    chapter_id = chapter.id if chapter else gate(number).chapter
    label = session.tree_label
    modules = (_imported_hashes(session, chapter_id, label) if "impl" in getattr(item, "fixturenames", ()) else {})
    if gates.rehearsal is not None:
        session.harness, store = gates.rehearsal.harness, KeptFromBenchmark(store)
    elif gates.on_accelerator and session.harness is None:
        session.harness = timer.harness_for(gates.platform)
    return GateRun(gates, gate=number, chapter=chapter_id, test_id=item.nodeid,
                   provenance=provenance(gates.platform, gates.device_kind, session.course.root, label, modules),
                   harness=session.harness, store=store, marker_cost=markers.roofline_cost(item),
                   live_device=backend.device_facts, tree_root=session.tree.root,
                   unconfirmed=_unconfirmed_kernels(session, number))


def _unconfirmed_kernels(session: CourseSession, number: int) -> tuple[str, ...]:
    """On the chip, for the learner's own exercises/: each module of the gate's kernels that the
    trusted check (`tpucourse confirm`) has not confirmed for the bytes this run imports, and why.
    Their own run's process could lie about what it computes; the confirmation was judged outside it."""
    judged = gate(number)
    if not (judged.times_own_kernel and session.tree.is_learners and session.gates.on_accelerator
            and session.gates.rehearsal is None):
        return ()
    try:
        data = state.read(session.course.root)
    except state.CorruptState as error:
        return (f"the state file cannot be read ({error})",)
    found = []
    for module in dict.fromkeys(kernel.partition(".")[0] for kernel in judged.kernels):
        exercise = session.course.exercise(f"{judged.chapter}.{module}")
        if exercise is None:
            continue
        path = Path(session.tree.chapter_dir(judged.chapter)) / f"{module}.py"
        digest = session.grading.imported.get(str(path.resolve())) or state.file_digest(path)
        ran = unit_files.relative(session.grading.unit_of([str(path.resolve())]), session.course.root)
        ran.pop(exercise.module_path, None)
        why = state.why_not_confirmed(data, exercise.key, digest, ran, session.course.root)
        if why:
            found.append(f"{exercise.module_path}: {why}; run `tpucourse confirm {judged.chapter}` first")
    return tuple(found)


def _imported_hashes(session: CourseSession, chapter_id: str, label: str) -> dict[str, str]:
    """The sha256 of each graded module of the chapter as this run imports it (imported now
    where it was not yet: the row must name the code that runs, not the file at the end)."""
    chapter_dir = session.tree.chapter_dir(chapter_id)
    shown_as = f"{label.removeprefix('impl-root:')}/{chapter_id}"
    modules = module_hashes(chapter_dir, shown_as)
    graded = Implementation(session.tree, session.course, chapter_id, session.grading)
    paths = [path for path in sorted(Path(chapter_dir).glob("*.py")) if f"{shown_as}/{path.name}" in modules]
    helpers = [path for path in paths if path.stem.startswith("_")]  # no `impl` attribute: what modules import
    for path in paths:
        if path in helpers:
            continue
        try:
            getattr(graded, path.stem).load()
        except LearnerCodeError:
            pass  # the test's own call reports it
        modules[f"{shown_as}/{path.name}"] = session.grading.imported.get(str(path.resolve()),
                                                                        modules[f"{shown_as}/{path.name}"])
    ran = session.grading.unit_of(str(path.resolve()) for path in paths)
    for path in helpers:  # as the graded modules ran it (grading/unit_files.py), else as it is now
        modules[f"{shown_as}/{path.name}"] = ran.get(os.path.abspath(path), modules[f"{shown_as}/{path.name}"])
    return modules
