"""The host-CPU half of a run whose kernels run natively on a TPU (grading/placement.py decides).

After collection the tests placed off the chip go to pytest processes of their own, one per
chapter folder, started with JAX_PLATFORMS=cpu and `--interpret tpu`, a few at a time: they run on
the host's CPU cores while this process runs the rest on the chip. Each child appends its reports
to a file, one JSON line each, serialized by pytest's own hook (`pytest_report_to_serializable`, as
pytest-xdist ships a worker's reports), and at its end what a worker hands its controller
(run/lifecycle.py). The parent logs them as its tests' own (HostCpuHalf).

A child that dies, or reports nothing for longer than its tests' deadlines allow, fails the tests
it had not reported, with the end of its log; the run goes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..gates import markers
from ..grading import placement
from .options import HOST_CPU_CHILD, HOST_CPU_CHILD_DEST, OPTIONS

PLACEMENT = pytest.StashKey[placement.Placement]()
POLL_SECONDS = 0.02
LOG_LINES = 15  # of a child's log, quoted where it ended without reporting a test


def is_child(config: pytest.Config) -> bool:
    """This run is the host-CPU half of another (its reports go to a file, its state nowhere)."""
    return config.getoption(HOST_CPU_CHILD_DEST, None) is not None


def place(session: pytest.Session, run) -> None:
    """(After collection) every test placed; on a TPU, the children of those placed off the chip start
    and the half that logs their reports is registered."""
    run.devices_declared = {item.nodeid: markers.devices_needed(item) for item in session.items
                            if markers.devices_needed(item) is not None}
    host = placement.Host(run.backend.platform, run.backend.mode == "native", run.backend.device_count)
    if not host.native_tpu or is_child(session.config):
        return
    if run.options.gates:  # a gate run times and records on the chip: nothing runs elsewhere, and a gate
        # test's interpret-only checks step aside (the chapter's own tests make them on the host's CPU)
        run.grading.interpret_elsewhere = frozenset(i.nodeid for i in session.items if markers.host_interpret(i))
        return
    placed = {}
    for item in session.items:
        decided = placement.decide(interpret_part=markers.host_interpret(item),
                                   devices_needed=markers.devices_needed(item), host=host)
        if decided.where != placement.HERE:
            item.stash[PLACEMENT] = placed[item.nodeid] = decided
    run.grading.interpret_elsewhere = frozenset(i for i, p in placed.items() if p.where == placement.BOTH)
    if placed:
        run.host_cpu = HostCpuRuns(session.config, [(i.nodeid, placed[i.nodeid]) for i in session.items
                                                    if i.nodeid in placed])
        session.config.pluginmanager.register(HostCpuHalf(run, run.host_cpu), "tpucourse-host-cpu")
        run.host_cpu.start()


def register_child(config: pytest.Config) -> None:
    """(A host-CPU child) its reports go to the file the parent reads."""
    if is_child(config):
        config.pluginmanager.register(HostCpuChild(config), "tpucourse-host-cpu-child")


def summary_line(run) -> str | None:
    """How many tests ran where, for the closing summary of a run on a TPU."""
    if run.host_cpu is None:
        return None
    both = sum(1 for _, p in run.host_cpu.placed if p.where == placement.BOTH)
    whole = len(run.host_cpu.placed) - both
    parts = []
    if both:
        parts.append(f"{both} test{'s' if both != 1 else ''} ran natively and again under TPU interpret mode "
                     f"on this host's CPU (races, DMA orders, bounds: what only the interpreter shows)")
    if whole:
        parts.append(f"{whole} multi-device test{'s' if whole != 1 else ''} ran on this host's CPU devices "
                     f"under TPU interpret mode (more devices than this host has chips)")
    return f"tpucourse: on this TPU host, {'; '.join(parts)}; logs in {run.host_cpu.folder}"


class HostCpuHalf:
    """(The run on the chip) the tests placed off it: their children's reports, as the tests' own.

    A test placed HOST_CPU is not run here: its child's reports are logged as its own, as a
    pytest-xdist controller logs a worker's. A test placed BOTH runs natively, and its call report
    then takes in its child's verdict: it passes only where both passed; a failure or a skip of the
    host-CPU half is the test's, saying where it came from. Each such report says where it ran on
    its line (-v), and the closing summary counts them (summary_line).
    """

    def __init__(self, run, runs: HostCpuRuns):
        self.run = run
        self.runs = runs

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool | None:
        """A test placed wholly on the host's CPU: its child's reports, logged as its own."""
        placed = item.stash.get(PLACEMENT, None)
        if placed is None or placed.where != placement.HOST_CPU:
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        found = self.runs.reports_for(item.nodeid)
        reports = ([_report(item.config, data, placed) for data in found] if isinstance(found, list)
                   else _lost(item, placed, found))
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
        # What pytest's own protocol does last (runner.pytest_runtest_teardown): tear down the fixtures and
        # collectors the next test does not need, the earlier tests' (this one set nothing up). Not the
        # whole teardown hook: its other plugins' wrappers expect the setup this test never had. An error
        # there is reported.
        teardown = pytest.CallInfo.from_call(
            lambda: item.session._setupstate.teardown_exact(nextitem), when="teardown")
        if teardown.excinfo is not None:
            ihook.pytest_runtest_logreport(report=ihook.pytest_runtest_makereport(item=item, call=teardown))
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """A test placed BOTH: its native call report takes in its host-CPU half's verdict."""
        report = yield
        placed = item.stash.get(PLACEMENT, None)
        if placed is None or placed.where != placement.BOTH or call.when != "call":
            return report
        report.tpucourse_placement = placed.why
        found = self.runs.reports_for(item.nodeid)
        if not isinstance(found, list):
            verdict = _lost(item, placed, found)[1]
        else:
            children = [_report(item.config, data, placed) for data in found]
            verdict = next((r for r in children if r.failed), None) or \
                next((r for r in children if r.skipped), None)
        if verdict is None:
            return report
        half = f"its part under TPU interpret mode on this host's CPU ({placed.why})"
        if report.passed and verdict.failed:
            report.outcome = "failed"
            report.longrepr = (f"{verdict.longreprtext.rstrip()}\n\n(found by its part under TPU interpret mode on "
                               f"this host's CPU; its values passed natively)")
            for name in ("tpucourse_todo", "tpucourse_headline"):
                if hasattr(verdict, name):
                    setattr(report, name, getattr(verdict, name))
        elif report.passed and verdict.skipped:
            reason = verdict.longrepr[2] if isinstance(verdict.longrepr, tuple) else verdict.longreprtext
            report.outcome = "skipped"
            path, line, _ = item.location
            report.longrepr = (str(item.path), (line or 0) + 1, f"{reason} ({half})")
            report.tpucourse_skip_by = getattr(verdict, "tpucourse_skip_by", None)
        else:
            report.sections.append((f"host CPU: {verdict.outcome}", verdict.longreprtext or verdict.outcome))
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config):
        """Where a test placed off the chip ran, on its line under -v."""
        placed = getattr(report, "tpucourse_placement", None)
        if placed is None or report.when != "call" or getattr(report, "tpucourse_todo", False):
            return None
        letter = {"passed": ".", "failed": "F", "skipped": "s"}[report.outcome]
        short = "host CPU" if placed.startswith("on ") else "values native, interpret part on host CPU"
        return report.outcome, letter, (f"{report.outcome.upper()} [{short}]",
                                        {"green": report.passed, "red": report.failed, "yellow": report.skipped})

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        """The children end (stopped, where the run stopped early) and hand back what they saw, before
        the run's state is saved (lifecycle.py)."""
        for output in self.runs.finish():
            self.run.take_worker_output(output)


def _report(config: pytest.Config, data: dict, placed: placement.Placement) -> pytest.TestReport:
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    report.location = tuple(report.location)
    if isinstance(report.longrepr, list):
        report.longrepr = tuple(report.longrepr)
    report.tpucourse_placement = placed.why
    return report


def _lost(item: pytest.Item, placed: placement.Placement, why: str) -> list[pytest.TestReport]:
    """setup, call and teardown reports of a test its host-CPU child never reported: a failure."""
    text = f"{item.nodeid} was placed on this host's CPU ({placed.why}), and that run {why}"
    reports = []
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "passed")):
        report = pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome,
                                   text if outcome == "failed" else None, when)
        report.tpucourse_placement = placed.why
        if when == "call":
            report.tpucourse_headline = text.splitlines()[0]
        reports.append(report)
    return reports


# ------------------------------------------------------------------ the children


@dataclass
class _Child:
    """One host-CPU pytest process and what it has reported so far."""

    name: str
    nodeids: list[str]
    cpu_devices: int
    folder: Path
    process: subprocess.Popen | None = None
    reports: dict = field(default_factory=dict)  # node id -> [serialized report, ...]
    finished: set = field(default_factory=set)
    output: dict | None = None  # what it handed back at its end
    read_to: int = 0
    heard: float = 0.0  # time.monotonic() of its last line

    @property
    def results(self) -> Path:
        return self.folder / f"{self.name}.jsonl"

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def read(self) -> None:
        """Take in the lines written since the last read (a line counts once it ends)."""
        try:
            with open(self.results, "rb") as file:
                file.seek(self.read_to)
                data = file.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if not end:
            return
        self.read_to += end
        self.heard = time.monotonic()
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if "report" in entry:
                self.reports.setdefault(entry["report"].get("nodeid"), []).append(entry["report"])
            elif "finished" in entry:
                self.finished.add(entry["finished"])
            elif "output" in entry:
                self.output = entry["output"]

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"  | {line}" for line in lines[-LOG_LINES:])


class HostCpuRuns:
    """The host-CPU children of one run: one per chapter, at most `slots` at a time."""

    def __init__(self, config: pytest.Config, placed: list[tuple[str, placement.Placement]]):
        self.config = config
        self.placed = placed
        self.folder = Path(tempfile.mkdtemp(prefix="tpucourse-host-cpu-"))
        groups: dict[str, list[tuple[str, placement.Placement]]] = {}
        for nodeid, where in placed:  # one child per chapter folder, in the run's order
            groups.setdefault(nodeid.split("::")[0].rsplit("/", 1)[0], []).append((nodeid, where))
        self.children = [_Child(f"{n:02d}-{Path(folder).name}", [i for i, _ in tests],
                                max([p.cpu_devices for _, p in tests] + [0]), self.folder)
                         for n, (folder, tests) in enumerate(groups.items())]
        self.child_of = {nodeid: child for child in self.children for nodeid in child.nodeids}
        self.slots = max(1, min(4, (os.cpu_count() or 2) // 3))
        self.stall = _stall_seconds(config)

    def start(self) -> None:
        self._pump()

    def reports_for(self, nodeid: str) -> list[dict] | str:
        """The child's serialized reports of a test, once it finished it; else why they never came."""
        child = self.child_of[nodeid]
        while True:
            self._pump()
            child.read()
            if nodeid in child.finished:
                return child.reports.get(nodeid, [])
            if child.process is not None and not child.running:
                child.read()
                if nodeid in child.finished:
                    return child.reports.get(nodeid, [])
                return (f"ended (exit code {child.process.returncode}) without reporting it; the end of its log "
                        f"({child.log}):\n{child.log_tail()}")
            if child.running and self.stall and time.monotonic() - child.heard > self.stall:
                _stop(child.process)
                return (f"reported nothing for {self.stall:.0f} s and was stopped; the end of its log "
                        f"({child.log}):\n{child.log_tail()}")
            time.sleep(POLL_SECONDS)

    def finish(self) -> list[dict]:
        """Every child ended: those of tests the run never reached are stopped, not waited for."""
        outputs = []
        for child in self.children:
            if child.running:
                if all(n in child.finished for n in child.nodeids) or child.output is not None:
                    try:
                        child.process.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        _stop(child.process)
                else:
                    _stop(child.process)
            child.read()
            if child.output is not None:
                outputs.append(child.output)
        return outputs

    def _pump(self) -> None:
        """Start waiting children while fewer than `slots` run (in the run's order)."""
        running = sum(1 for c in self.children if c.running)
        for child in self.children:
            if running >= self.slots:
                return
            if child.process is None:
                self._start(child)
                running += 1

    def _start(self, child: _Child) -> None:
        command = [sys.executable, "-m", "pytest", *child.nodeids, *child_arguments(self.config, child.cpu_devices),
                   HOST_CPU_CHILD, str(child.results)]
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPUCOURSE_WARM": "0"}
        env.pop("PYTEST_CURRENT_TEST", None)
        child.heard = time.monotonic()
        with open(child.log, "wb") as log:
            child.process = subprocess.Popen(command, cwd=self.config.rootpath, env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT)


def child_arguments(config: pytest.Config, cpu_devices: int) -> list[str]:
    """The options a host-CPU child runs with: this run's graded tree and settings, on the CPU."""
    options = config.stash[OPTIONS]
    args = ["--interpret", "tpu", "-p", "no:cacheprovider", "-q",
            "--kernel-timeout", repr(options.kernel_timeout),
            # a cache of its own: CPU programs, kept and pruned apart from the chip's run
            "--jax-cache", "none" if options.jax_cache == "none" else f"{options.jax_cache}-host-cpu",
            "--cpu-devices", str(max(options.cpu_devices, cpu_devices)),
            "--tb", str(config.getoption("tbstyle", "auto") or "auto")]
    if options.solutions:
        args.append("--solutions")
    if options.impl_root:
        args += ["--impl-root", str(Path(config.invocation_params.dir, options.impl_root).resolve())]
    if options.hypothesis_profile:
        args += ["--hypothesis-profile", options.hypothesis_profile]
    seed = config.getoption("hypothesis_seed", None)
    if seed is not None:
        args += ["--hypothesis-seed", str(seed)]
    if options.chip:
        args += ["--chip", options.chip]
    return args + _plugin_arguments(config)


def _plugin_arguments(config: pytest.Config) -> list[str]:
    """-p options as this run was given them, and the course's plugin where no entry point loads it."""
    given, args = [], list(config.invocation_params.args)
    for i, arg in enumerate(args):
        if arg == "-p" and i + 1 < len(args):
            given += ["-p", str(args[i + 1])]
        elif arg.startswith("-p") and len(arg) > 2:
            given += ["-p", arg[2:]]
    plugin = sys.modules.get("pytest_tpucourse.plugin")
    by_entry_point = plugin is not None and config.pluginmanager.get_name(plugin) == "tpucourse"
    if not by_entry_point and "pytest_tpucourse.plugin" not in given:
        given += ["-p", "pytest_tpucourse.plugin"]
    return given


def _stall_seconds(config: pytest.Config) -> float | None:
    """How long a child may report nothing before it is stopped: every graded call of a test has the
    kernel deadline, and a test makes a few dozen; None where calls have no deadline."""
    seconds = config.stash[OPTIONS].kernel_timeout
    return None if not seconds else max(600.0, 20 * seconds)


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()



# ------------------------------------------------------------------ the child's side


class HostCpuChild:
    """(A host-CPU child) each report, and each test's end, appended to the parent's file."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        write(self.config, {"report": self.config.hook.pytest_report_to_serializable(config=self.config,
                                                                                     report=report)})

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        write(self.config, {"finished": nodeid})


def hand_back(config: pytest.Config, output: dict) -> None:
    """(A child) what a pytest-xdist worker hands its controller, as the file's last line."""
    write(config, {"output": output})


def write(config: pytest.Config, entry: dict) -> None:
    with open(config.getoption(HOST_CPU_CHILD_DEST), "a", encoding="utf-8") as file:
        file.write(json.dumps(entry, default=str) + "\n")
