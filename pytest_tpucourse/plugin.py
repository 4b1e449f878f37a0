"""pytest hooks only: options, markers, the graded-tree fixture, reports, summary.

The plugin is inert outside a course checkout (a rootdir holding course.toml):
installing it changes nothing for other projects' test suites.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import chips, profiles, roofline
from .course import Course, CourseDataError, find_course_root, load_course
from .gates import criteria, report
from .gates import records as rec
from .gates import run as timing
from .gates import timer
from .grading import backend, deadline, vmem
from .grading.tree import GradedTree, Implementation, graded_tree
from .learner.progress import RunProgress
from .outcomes import GradingOutcome, Todo
from .state_recorder import StateRecorder

GATE_RANGE = range(0, 6)


@dataclass
class CourseSession:
    course: Course
    tree: GradedTree
    backend: backend.Backend
    progress: RunProgress
    hypothesis_profile: str
    jax_cache: Path | None = None


SESSION = pytest.StashKey[CourseSession]()
CHIPS = pytest.StashKey[chips.ChipRegistry]()
GATES = pytest.StashKey[timing.GateContext]()


def pytest_addhooks(pluginmanager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpucourse", "TPU kernel course")
    group.addoption(
        "--solutions", action="store_true", default=False,
        help="grade the shipped reference solutions (solutions/) instead of exercises/",
    )
    group.addoption(
        "--impl-root", metavar="DIR", default=None,
        help="grade the tree at DIR, laid out like solutions/ (DIR/chNN/<module>.py)",
    )
    group.addoption(
        "--interpret", choices=backend.INTERPRET_MODES, default="auto",
        help="how kernels run: auto (native on a TPU, TPU interpret mode elsewhere; "
        "default), tpu (TPU interpret mode everywhere), fast (generic interpreter: "
        "quicker, but blind to grid-order, uninitialised-memory and out-of-bounds bugs)",
    )
    group.addoption(
        "--jax-cache", metavar="DIR", default=".tpucourse/jax-cache",
        help="keep compiled XLA programs in DIR (relative to the course root) across runs; "
        "'none' turns it off (default: .tpucourse/jax-cache)",
    )
    group.addoption(
        "--gates", action="store_true", default=False,
        help="run only the @gate tests of the selected chapters",
    )
    group.addoption(
        "--chip", metavar="NAME", default=None,
        help=f"chip the gate predictions and records are for ({', '.join(chips.KNOWN_CHIPS)}, or one "
        "a plugin registers); on an accelerator it must be the chip the run executes on",
    )
    group.addoption(
        "--kernel-timeout", metavar="SECONDS", type=float, default=deadline.DEFAULT_SECONDS,
        help=f"deadline for each call into the graded code (default {deadline.DEFAULT_SECONDS:g}; 0: none): "
        "a kernel that hangs (a wait nothing signals, an endless loop) fails its test instead",
    )
    group.addoption(
        "--cpu-devices", metavar="N", type=int, default=backend.DEFAULT_CPU_DEVICES,
        help=f"CPU devices JAX simulates when no accelerator runs the tests, for the multi-device "
        f"exercises (default {backend.DEFAULT_CPU_DEVICES}); on a TPU the real devices are used",
    )
    group.addoption(
        "--records", metavar="PATH", default=None,
        help="gate records file to append to (default: bench/records.jsonl in the course checkout)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gate(n): a gate test of stage n (0-5); runs only with --gates",
    )
    config.addinivalue_line(
        "markers",
        "roofline(chip=None, flops=None, bytes=None): attach a roofline prediction to a benchmark test",
    )
    try:
        registry = chips.ChipRegistry(
            chip for found in config.hook.pytest_tpucourse_register_chips() for chip in found or ()
        )
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(f"pytest_tpucourse_register_chips: {error}") from None
    config.stash[CHIPS] = registry
    chip = config.getoption("chip")
    if chip is not None:
        try:
            config.option.chip = chips.validate_chip(chip, registry.names)
        except ValueError as error:
            raise pytest.UsageError(f"--chip: {error}") from None

    solutions, impl_root = config.getoption("solutions"), config.getoption("impl_root")
    if solutions and impl_root:
        raise pytest.UsageError("--solutions and --impl-root choose the graded tree: give one")
    if impl_root is not None and not Path(impl_root).is_dir():
        raise pytest.UsageError(f"--impl-root: {impl_root} is not a directory")

    root = find_course_root(config.rootpath)
    if root is None:
        if solutions or impl_root:
            raise pytest.UsageError(
                f"--solutions/--impl-root need a course checkout: no course.toml at or above "
                f"{config.rootpath}"
            )
        return
    try:
        course = load_course(root)
    except CourseDataError as error:
        raise pytest.UsageError(f"course data: {error}") from None

    try:
        backend.force_cpu_devices(config.getoption("cpu_devices"))
    except ValueError as error:
        raise pytest.UsageError(f"--cpu-devices: {error}") from None

    from hypothesis import settings

    profile = config.getoption("hypothesis_profile", None) or profiles.default_profile()
    settings.load_profile(profile)

    session = CourseSession(
        course=course,
        tree=graded_tree(root, solutions, impl_root),
        backend=backend.select(config.getoption("interpret")),
        progress=RunProgress(course),
        hypothesis_profile=profile,
        jax_cache=backend.use_compilation_cache(
            None if config.getoption("jax_cache") == "none" else root / config.getoption("jax_cache")),
    )
    config.stash[SESSION] = session
    platform, device_kind = (config.hook.pytest_tpucourse_device(config=config)
                             or (session.backend.platform, session.backend.device_kind))
    try:
        config.stash[GATES] = timing.gate_context(
            registry, config.getoption("chip"), platform, device_kind,
            Path(config.getoption("records") or root / rec.DEFAULT_PATH), root,
            strict=config.getoption("gates") or config.getoption("chip") is not None,
        )
    except chips.ChipMismatch as error:
        raise pytest.UsageError(f"--chip: {error}") from None
    _configure_guards(config, registry)
    config.pluginmanager.register(ProgressRecorder(session.progress), "tpucourse-progress")
    config.pluginmanager.register(
        StateRecorder(root, session.progress, learner_tree=session.tree.kind == "exercises"),
        "tpucourse-state",
    )


def _configure_guards(config: pytest.Config, registry: chips.ChipRegistry) -> None:
    """The deadline on each graded call, and the VMEM a kernel's scratch must fit (--chip, or v5e)."""
    try:
        deadline.configure(config.getoption("kernel_timeout"))
    except ValueError as error:
        raise pytest.UsageError(f"--kernel-timeout: {error}") from None
    name = config.getoption("chip") or vmem.DEFAULT_CHIP
    vmem.configure(name, registry.get(name).vmem_bytes)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION in config.stash:
        backend.restore()


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION, None)
    if session is None:
        return []
    b = session.backend
    lines = [
        f"tpucourse: grading {session.tree.describe(session.course.root)}",
        f"tpucourse: kernels run under {b.describe_mode}",
        f"tpucourse: backend {b.platform} ({b.device_kind}, {b.device_count} "
        f"device{'s' if b.device_count != 1 else ''}), jax {b.jax_version}, "
        f"jaxlib {b.jaxlib_version}, hypothesis profile {session.hypothesis_profile}, "
        f"compilation cache {session.jax_cache or 'off'}",
    ]
    context = config.stash.get(GATES, None)
    if config.getoption("gates") and context is not None:
        where = (f"measured on {context.device_kind}" if context.on_accelerator
                 else "predicted only: nothing is timed off-chip")
        lines.append(f"tpucourse: gates for chip {context.chip.name} ({where}); records {context.records_path}")
    return lines


@pytest.fixture
def tpucourse_timer(request: pytest.FixtureRequest):
    """A factory for the timers gate tests use on hardware (pytest-benchmark underneath).

    factory() times with the test's `benchmark` fixture; factory("floor") with another
    pytest-benchmark fixture reported as test[floor] (a trio times three targets).
    """
    def factory(label=None):
        bench = (request.getfixturevalue("benchmark") if label is None
                 else timer.labelled_benchmark(request, label))
        return timer.BenchmarkTimer(bench)
    return factory


@pytest.fixture
def gate_run(request: pytest.FixtureRequest, tpucourse_timer) -> timing.GateRun:
    """Writes this @gate test's records: predictions off-chip, measurements on the chip."""
    mark = request.node.get_closest_marker("gate")
    context = request.config.stash.get(GATES, None)
    if mark is None or context is None:
        pytest.fail("gate_run is for @pytest.mark.gate tests inside a course checkout", pytrace=False)
    number = (list(mark.args) + list(mark.kwargs.values()))[0]
    session = request.config.stash[SESSION]
    chapter = session.course.chapter_of_path(request.path)
    return context.run_for(gate=number, chapter=chapter.id if chapter else criteria.gate(number).chapter,
                           test_id=request.node.nodeid,
                           timer_factory=tpucourse_timer,
                           marker_cost=_marker_cost(request.node),
                           interpreted=session.backend.mode != "native",
                           graded=session.tree.describe(session.course.root))


def _marker_cost(item: pytest.Item) -> roofline.Cost | None:
    """The cost a gate test's @pytest.mark.roofline gives; its floor goes into the records."""
    mark = item.get_closest_marker("roofline")
    return roofline.marker_cost(mark) if mark is not None else None


@pytest.fixture
def mesh(request: pytest.FixtureRequest):
    """A factory of 1-D device meshes: mesh(4) spans the first 4 devices, axis "x".

    Off an accelerator the devices are the simulated CPU devices (--cpu-devices); on a
    TPU, the real chips. A test asking for more devices than the run has is skipped,
    saying how many it needs. Axes are Auto, so shard_map places its inputs itself.
    """
    def factory(n: int, axis: str = "x"):
        import jax
        from jax.sharding import AxisType

        available = jax.devices()
        if n > len(available):
            where = (f"{len(available)} {available[0].platform} device(s)" if available[0].platform != "cpu"
                     else f"{len(available)} CPU device(s) (--cpu-devices)")
            pytest.skip(f"needs {n} devices; this run has {where}")
        return jax.make_mesh((n,), (axis,), devices=available[:n], axis_types=(AxisType.Auto,))
    return factory


@pytest.fixture
def roofline_prediction(request: pytest.FixtureRequest) -> roofline.Prediction:
    """The prediction of this test's @pytest.mark.roofline(flops=..., bytes=...)."""
    prediction = _marker_prediction(request.node, request.config)
    if prediction is None:
        pytest.fail("roofline_prediction needs @pytest.mark.roofline(flops=..., bytes=...)", pytrace=False)
    return prediction


def _marker_prediction(item: pytest.Item, config: pytest.Config) -> roofline.Prediction | None:
    mark = item.get_closest_marker("roofline")
    cost = roofline.marker_cost(mark) if mark is not None else None
    if cost is None:
        return None
    context = config.stash.get(GATES, None)
    name = mark.kwargs.get("chip") or config.getoption("chip") or (
        context.chip.name if context is not None and context.chip is not None else chips.DEFAULT_PREDICTION_CHIP)
    return roofline.predict(config.stash[CHIPS].get(name).per_device(), cost)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    import jax
    import jaxlib

    context = config.stash.get(GATES, None)
    machine_info["tpucourse"] = {
        "chip": context.chip.name if context is not None and context.chip is not None else None,
        "device_kind": context.device_kind if context is not None else None,
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
    }


@pytest.fixture(scope="module")
def impl(request: pytest.FixtureRequest) -> Implementation:
    """The graded tree's modules for this test file's chapter: `impl.matmul.matmul(x, y)`."""
    session = request.config.stash.get(SESSION, None)
    if session is None:
        pytest.fail("the impl fixture works only inside a course checkout (course.toml)", pytrace=False)
    chapter = session.course.chapter_of_path(request.path)
    if chapter is None:
        pytest.fail(
            f"{request.path}: impl grades files under exercises/chNN/ of a chapter in course.toml",
            pytrace=False,
        )
    return Implementation(session.tree, session.course, chapter.id)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in item.iter_markers("gate"):
            _validate_gate_mark(item, mark)
        for mark in item.iter_markers("roofline"):
            try:
                if mark.kwargs.get("chip") is not None:
                    chips.validate_chip(mark.kwargs["chip"], config.stash[CHIPS].names)
                prediction = _marker_prediction(item, config)
            except ValueError as error:
                raise pytest.UsageError(f"{item.nodeid}: roofline marker: {error}") from None
            if prediction is not None:
                item.user_properties.append(("roofline", {
                    "chip": prediction.chip, "floor_s": prediction.floor_seconds,
                    "bound": prediction.bound, "intensity": prediction.intensity,
                }))

    if config.getoption("gates"):
        selected = [i for i in items if i.get_closest_marker("gate") is not None]
        deselected = [i for i in items if i.get_closest_marker("gate") is None]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = selected
    else:
        skip = pytest.mark.skip(reason="gate test: runs with --gates")
        for item in items:
            if item.get_closest_marker("gate") is not None:
                item.add_marker(skip)

    session = config.stash.get(SESSION, None)
    if session is not None:
        _sort_in_course_order(items, session.progress)
        session.progress.collected(item.nodeid for item in items)


def _sort_in_course_order(items: list[pytest.Item], progress: RunProgress) -> None:
    """Graded tests run in the order a learner meets the exercises (course.toml)."""
    rank = {
        exercise.key: index
        for index, exercise in enumerate(e for c in progress.course.chapters for e in c.exercises)
    }

    def key(item: pytest.Item) -> int:
        exercise = progress.exercise_of(item.nodeid)
        return rank[exercise.key] if exercise is not None else len(rank)

    items.sort(key=key)


WORKER_DESELECTED = "tpucourse_deselected"


class ProgressRecorder:
    """Feeds every report (local, or from pytest-xdist workers) into RunProgress.

    Tests deselected on an xdist worker (`-k`, `--lf`) are invisible to the
    controller, so each worker sends their ids back in its workeroutput and the
    controller counts them as deselected: an exercise with deselected tests is
    never done.
    """

    def __init__(self, progress: RunProgress):
        self.progress = progress
        self.deselected_here: list[str] = []

    def pytest_deselected(self, items) -> None:
        ids = [item.nodeid for item in items]
        self.deselected_here.extend(ids)
        self.progress.deselected(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.progress.collected(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.progress.deselected(output.get(WORKER_DESELECTED, ()))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_DESELECTED] = self.deselected_here

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # pytest-xdist puts "[gw0] <platform> -- Python ..." above a worker's failure text.
        message = re.sub(r"\A\[gw\d+\] [^\n]*\n", "", report.longreprtext) if report.failed else ""
        self.progress.record(
            report, is_todo=getattr(report, "tpucourse_todo", False), message=message
        )


def _validate_gate_mark(item: pytest.Item, mark: pytest.Mark) -> None:
    args = list(mark.args) + list(mark.kwargs.values())
    if len(args) != 1 or not isinstance(args[0], int) or isinstance(args[0], bool) or args[0] not in GATE_RANGE:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.gate takes one integer gate number 0-5, got "
            f"gate({', '.join(map(repr, args))})"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    outcome = _grading_outcome(call.excinfo.value) if call.excinfo else None
    if outcome is not None:
        notes = getattr(call.excinfo.value, "__notes__", [])
        report.longrepr = "\n".join([outcome.render(), *_useful_notes(notes)])
        report.tpucourse_todo = isinstance(outcome, Todo)
    if report.failed and call.when == "call":
        backend.reset_after_failure()
    return report


def _grading_outcome(error: BaseException) -> GradingOutcome | None:
    """The GradingOutcome behind an exception (hypothesis may group several)."""
    if isinstance(error, GradingOutcome):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _grading_outcome(inner)
            if found is not None:
                return found
    return None


def _useful_notes(notes: list[str]) -> list[str]:
    """Hypothesis' falsifying example (the reproducer), without fixture noise."""
    kept = []
    for note in notes:
        lines = [line for line in str(note).splitlines() if "impl=" not in line]
        if lines:
            kept.append("\n".join(lines))
    return kept


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """A corrupt records file fails a --gates run: a silently skipped row would be a lie."""
    context = session.config.stash.get(GATES, None)
    if session.config.getoption("gates") and context is not None and not hasattr(session.config, "workerinput"):
        try:
            rec.read(context.records_path)
        except rec.CorruptRecords:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if getattr(report, "tpucourse_todo", False) and report.when == "call":
        return "todo", "T", ("TODO", {"yellow": True})
    return None


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    context = config.stash.get(GATES, None)
    show_gates = config.getoption("gates") and context is not None and context.chip is not None
    if session is None or not (session.progress.results or show_gates):
        return
    terminalreporter.write_sep("=", "tpucourse")
    try:
        all_records = rec.read(context.records_path) if context is not None else []
        passed = criteria.gates_passed(all_records)
    except rec.CorruptRecords as error:
        terminalreporter.write_line(f"gate records unreadable: {error}", red=True)
        all_records, passed = [], None
    if show_gates and passed is not None:
        for line in report.gate_table_lines(all_records, context.chip.name):
            terminalreporter.write_line(line)
    lines = session.progress.summary_lines(
        session.tree.describe(session.course.root),
        learner_tree=session.tree.kind == "exercises",
        gates_passed=passed,
        only_ran=bool(config.getoption("gates")),
    )
    for line in lines:
        terminalreporter.write_line(line)
