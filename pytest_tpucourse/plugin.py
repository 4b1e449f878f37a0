"""The pytest entry point: the course's options and hook specifications, and the run's session
built and closed; every other hook lives in one module per concern, which pytest loads from
`pytest_plugins` below, right after this one.

The session (run/session.py) holds the run's state and is no plugin: each concern module
implements its hooks once, reading the session from the config's stash, as pytest's own
`_pytest` modules and pytest-benchmark do. The one hook pytest calls without a config or an
item, `pytest_runtest_logreport`, is a method of an object registered with the session
(run/reports.py's ReportCounter), at the point the session is built.

The plugin is inert outside a course checkout (a rootdir holding course.toml): installing
it changes nothing for other projects' test suites. pytest imports this module and its
concern modules in every run, so they load nothing heavy: no JAX, NumPy or hypothesis until
a course run starts. Nothing else imports the concern modules: pytest does, marking them
for assertion rewriting first.
"""

from __future__ import annotations

import pytest

from .gates import markers
from .run import options as course_options
from .run.options import OPTIONS, RunOptions
from .run.session import SESSION, CourseSession

# One module per concern; each hook is implemented once among them and this module.
pytest_plugins = (
    "pytest_tpucourse.run.collection",  # markers checked, gate tests selected, course order, what the run holds
    "pytest_tpucourse.run.graded_call",  # the outermost view of each test's call, and what it runs under
    "pytest_tpucourse.run.reports",  # a report's short message and status; how it counts towards progress
    "pytest_tpucourse.run.lifecycle",  # the run's start, its xdist workers' handoff, the state file at its end
    "pytest_tpucourse.run.summary",  # the header lines and the closing summary
    "pytest_tpucourse.run.fixtures",  # impl, mesh
    "pytest_tpucourse.run.gate_tests",  # gate_run, roofline_prediction, pytest-benchmark's machine info
)

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


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    course_options.refuse_numprocesses_without_xdist(args)


@pytest.hookimpl(tryfirst=True)  # the course's hypothesis profiles exist before hypothesis loads one
def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    options = config.stash[OPTIONS] = RunOptions.from_config(config)
    session = CourseSession.from_config(config, options)
    if session is not None:
        from .run.reports import ReportCounter  # loaded already, by pytest_plugins

        config.stash[SESSION] = session
        config.pluginmanager.register(ReportCounter(session), "tpucourse-reports")
        if options.gates and getattr(config, "workerinput", None) is None:  # the process that prints the run
            from .run.gate_progress import GateProgress

            session.gate_progress = GateProgress(session, config)
            config.pluginmanager.register(session.gate_progress, "tpucourse-gate-progress")
    if session is not None:
        from .run import host_cpu

        host_cpu.register_child(config)  # a host-CPU child of a run on a TPU: its reports go to its parent
    if config.getoption("tpucourse_results") is not None:
        from .classroom.record import EndOfRunRecord

        config.stash[RESULTS_RECORD] = record = EndOfRunRecord.from_config(config, session)
        config.pluginmanager.register(record, "tpucourse-results")
    if config.getoption("isolated"):
        if session is None:
            raise pytest.UsageError("--isolated checks a course's exercises: run it in a course checkout (course.toml)")
        from .classroom.isolated import IsolatedCheck

        config.pluginmanager.register(IsolatedCheck(session), ISOLATED_NAME)
    if config.getoption("watch_run") and session is not None:
        from .learner.watch_run import WatchRun

        config.pluginmanager.register(WatchRun(config, session.course.root, config.getoption("watch_run")),
                                      "tpucourse-watch-run")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config):
    """A plain run of a course checkout is handed to the warm process an earlier run left, where
    one of the same Python, package and environment is idle: this process ends with the exit code
    it answers (learner/served_runs.py). None: the run happens here."""
    from .learner import served_runs

    return served_runs.serve_run(config)


@pytest.hookimpl(trylast=True)  # the run's last word: close() may end the process (session.py)
def pytest_unconfigure(config: pytest.Config) -> None:
    record = config.stash.get(RESULTS_RECORD, None)
    if record is not None:
        record.write()  # before close(), which may end the process
    session = config.stash.get(SESSION, None)
    if session is not None:
        from .learner import served_runs

        if session.backend.platform == "cpu":  # a warm process on a TPU would hold the chip (docs/tpu.md)
            served_runs.leave_warm_process(config)  # for the next run of this checkout
        session.close()
