"""The pytest entry point: options, markers, fixtures and hooks, wired to the run's session.

What a run does lives in session.py (`CourseSession`, built once from the config, is also
the plugin object that receives the reports); this module only connects pytest to it.
The plugin is inert outside a course checkout (a rootdir holding course.toml): installing
it changes nothing for other projects' test suites. pytest imports this module in every
run, so it loads nothing heavy: no JAX, NumPy or hypothesis until a course run starts.
"""

from __future__ import annotations

import pytest

from .core import profiles
from .gates import markers, timer
from .grading import backend
from .grading.messages import outcome_report
from .run import options as course_options
from .run.session import CALL_SEEN, OPTIONS, SESSION, CourseSession, RunOptions, run_chip


GATE_RESULTS = pytest.StashKey[list]()
RESULTS_RECORD = pytest.StashKey[object]()  # the end-of-run record (classroom/record.py), when asked for
ISOLATED_NAME = "tpucourse-isolated"  # the --isolated check's plugin (classroom/isolated.py)


def pytest_addhooks(pluginmanager) -> None:
    from .run import hookspecs

    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.add_hookspecs(hookspecs.Retired)


def pytest_plugin_registered(plugin, manager) -> None:
    """A conftest.py loaded during collection that answers a retired hook is refused too."""
    from .run import hookspecs

    hookspecs.refuse_retired(plugin)


def pytest_addoption(parser: pytest.Parser) -> None:
    course_options.add_options(parser)


@pytest.hookimpl(tryfirst=True)  # the course's hypothesis profiles exist before hypothesis loads one
def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    options = config.stash[OPTIONS] = RunOptions.from_config(config)
    session = CourseSession.from_config(config, options)
    if session is not None:
        config.stash[SESSION] = session
        config.pluginmanager.register(session, "tpucourse-session")
    if config.getoption("tpucourse_results") is not None:
        from .classroom.record import EndOfRunRecord

        config.stash[RESULTS_RECORD] = record = EndOfRunRecord.from_config(config, session)
        config.pluginmanager.register(record, "tpucourse-results")
    if config.getoption("isolated"):
        if session is None:
            raise pytest.UsageError("--isolated checks a course's exercises: run it in a course checkout (course.toml)")
        from .classroom.isolated import IsolatedCheck

        config.pluginmanager.register(IsolatedCheck(session), ISOLATED_NAME)


@pytest.hookimpl(trylast=True)  # the run's last word: close() may end the process (session.py)
def pytest_unconfigure(config: pytest.Config) -> None:
    record = config.stash.get(RESULTS_RECORD, None)
    if record is not None:
        record.write()  # before close(), which may end the process
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION, None)
    return session.header_lines() if session is not None else []


@pytest.fixture(scope="module")
def impl(request: pytest.FixtureRequest):
    """The graded tree's modules for this test file's chapter: `impl.matmul.matmul(x, y)`."""
    session = request.config.stash.get(SESSION, None)
    if session is None:
        pytest.fail("the impl fixture works only inside a course checkout (course.toml)", pytrace=False)
    return session.implementation(request.path)


@pytest.fixture
def gate_run(request: pytest.FixtureRequest):
    """Measures and records this @gate test: predictions off-chip, measurements on the chip.

    Its results decide the test's outcome in the report (pytest_runtest_makereport): awaiting
    hardware and not runnable are skips, a failed criterion a failure.
    """
    session = request.config.stash.get(SESSION, None)
    if request.node.get_closest_marker("gate") is None or session is None:
        pytest.fail("gate_run is for @pytest.mark.gate tests inside a course checkout", pytrace=False)
    run = session.gate_run(request.node, request.path, timer.BenchmarkStore(request))
    request.node.stash[GATE_RESULTS] = run.results
    return run


@pytest.fixture(scope="session")
def mesh(request: pytest.FixtureRequest):
    """A factory of 1-D device meshes: mesh(4) spans the first 4 devices, axis "x".

    Off an accelerator the devices are the simulated CPU devices (--cpu-devices); on a
    TPU, the real chips. A test asking for more devices than the run has is skipped,
    saying how many it needs. Axes are Auto, so shard_map places its inputs itself.
    The factory holds no state, so it is session-scoped: hypothesis' @given tests may
    use it (a function-scoped fixture fails their health check).
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    options = config.stash[OPTIONS]
    markers.check(items, options.registry, run_chip(config))
    markers.select_gate_tests(config, items, gates_only=options.gates)
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.collected(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A graded property test draws the examples of its graded file (session.seed_examples), in
    the dev profile over the cases its explicit examples compiled; a test marked
    kernel_timeout(s) gives its graded calls at most s seconds (deadlock tests)."""
    seconds = markers.kernel_timeout(item)
    session = item.config.stash.get(SESSION, None)
    if session is None:
        return (yield)
    session.seed_examples(item)
    with profiles.drawing_for(getattr(item, "obj", None)):
        if seconds is None:
            return (yield)
        with session.grading.deadline.at_most(seconds, "this test's kernel_timeout marker"):
            return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test that ended in a GradingOutcome reports its short message (a stub: TODO)."""
    report = yield
    session = item.config.stash.get(SESSION, None)
    if call.when == "call":  # how the session saw the call end, for a controller under pytest-xdist
        report.tpucourse_call = item.stash.get(CALL_SEEN, None)
    if report.skipped and call.excinfo is not None and session is not None:
        report.tpucourse_skip_by = session.skip_made_by(item, call.excinfo.value)
    found = outcome_report(call.excinfo.value) if call.excinfo else None
    if found is not None:
        report.longrepr, report.tpucourse_todo, report.tpucourse_headline = found
    if call.when == "call" and report.passed:
        _gate_outcome(item, report)  # a gate test that returned takes the outcome its results say
    edits = markers.edits_file(item)
    if edits is not None:
        report.tpucourse_edits = edits  # what the learner fixes when this test fails
    if report.failed and session is not None:
        session.reported(item, report, outcome=found is not None)
        if call.when == "call":
            backend.reset_after_failure()  # a failing kernel's simulated TPU state must not leak
    return report


def _gate_outcome(item: pytest.Item, report: pytest.TestReport) -> None:
    """A gate test that returned normally takes the outcome its gate results say."""
    session = item.config.stash.get(SESSION, None)
    decided = None if session is None else session.gate_test_outcome(item.stash.get(GATE_RESULTS, ()))
    if decided is None:
        return
    report.outcome, message = decided
    if report.outcome == "skipped":
        path, line, _ = item.location
        report.longrepr = (str(item.path), (line or 0) + 1, f"Skipped: {message}")
    else:
        report.longrepr = message


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    if getattr(report, "tpucourse_todo", False) and report.when == "call":
        return "todo", "T", ("TODO", {"yellow": True})
    return None
