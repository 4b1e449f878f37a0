"""One pytest run of the course, as objects built once from the config.

`RunOptions.from_config` reads and checks the plugin's options, once, in every run.
Inside a course checkout `CourseSession.from_config` builds the run: the course, the
graded tree, the backend, the chip (resolved once: gate records, roofline markers, the
VMEM budget and the TPU lowering check all read it), the grading context (the deadline,
the VMEM budget and the run's caches) and the run's progress. The session is the one
plugin object that receives the run's reports: it keeps progress (pytest-xdist workers'
deselections included), writes the learner's state file and prints the closing summary.
It also keeps the run honest (docs/earned.md): the checker bound before any graded import
(grading/toolkit_guard.py), passes counted only where it saw the test return, skips only
where the course made them, the graded test files checked against the course's
(learner/shipped.py), plugins that hook reports named (learner/foreign_plugins.py), a marker
for a run that never reaches its summary (learner/run_markers.py), and threads or forks that
graded code leaves behind ended (grading/leftovers.py).

Importing this module loads no JAX, NumPy or hypothesis: building the session does.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from .. import chips
from . import hookspecs
from ..core.course import EXERCISES, SOLUTIONS, Course, CourseDataError, find_course_root, load_course
from ..gates import markers, report
from ..gates.criteria import gate
from ..gates import records as rec
from ..gates.run import GateContext, GateRun, gate_context
from ..gates.provenance import module_hashes, provenance, tree_label
from ..gates.rehearsal import KeptFromBenchmark, Rehearsal
from ..grading import backend, compiled, context, leftovers, solution_reads
from ..grading.context import GradingContext
from ..grading.deadline import Deadline
from ..grading.interrupts import CTRL_C
from ..grading.messages import without_reproduction
from ..grading.toolkit_guard import ToolkitGuard
from ..grading.tree import GradedTree, Implementation, graded_tree
from ..grading.vmem import VmemBudget
from ..learner import foreign_plugins, next_up, run_markers, shipped, state
from ..learner.progress import RunProgress
from ..core.outcomes import LearnerCodeError, first_line
from ..core.paths import shown, shown_in_text

OPTIONS = pytest.StashKey["RunOptions"]()
SESSION = pytest.StashKey["CourseSession"]()

# The key under which an xdist worker hands its deselected test ids to the controller.
WORKER_DESELECTED = "tpucourse_deselected"
WORKER_FOREIGN = "tpucourse_foreign_hooks"  # a worker's plugins that hook reports
WORKER_IMPORTED = "tpucourse_imported"  # a worker's graded modules: path -> sha256 of the bytes imported
WORKER_TEST_FILES = "tpucourse_test_files"  # a worker's graded test files: key -> [{path: sha256}, shipped, why]
CALL_SEEN = pytest.StashKey[str]()  # how the session saw a test's call phase end: "returned", "raised ..."
_PACKAGE = Path(__file__).resolve().parents[1]  # the package
TPU_COMPILES = "tpu-compiles"  # the folder of --jax-cache keeping compiles for a described TPU


@dataclass(frozen=True)
class RunOptions:
    """The plugin's options as given, checked where a run outside a course checks them too."""

    registry: chips.ChipRegistry  # the built-in chips and those plugins register
    chip: str | None  # --chip, normalised
    solutions: bool
    impl_root: str | None
    interpret: str
    jax_cache: str
    gates: bool
    kernel_timeout: float
    cpu_devices: int
    records: str | None
    hypothesis_profile: str | None
    rehearse: bool = False

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunOptions:
        for plugin in config.pluginmanager.get_plugins():
            hookspecs.refuse_retired(plugin)
        try:
            registry = chips.ChipRegistry(
                chip for found in config.hook.pytest_tpucourse_register_chips() for chip in found or ())
        except (TypeError, ValueError) as error:
            raise pytest.UsageError(f"pytest_tpucourse_register_chips: {error}") from None
        chip = config.getoption("chip")
        if chip is not None:
            try:
                chip = config.option.chip = chips.validate_chip(chip, registry.names)
            except ValueError as error:
                raise pytest.UsageError(f"--chip: {error}") from None
        if config.getoption("tpucourse_numprocesses", None) is not None:
            raise pytest.UsageError("-n runs the tests in parallel with pytest-xdist, which is not installed: "
                                    "pip install pytest-xdist (or, in the course checkout, pip install -e '.[test]')")
        solutions, impl_root = config.getoption("solutions"), config.getoption("impl_root")
        if solutions and impl_root:
            raise pytest.UsageError("--solutions and --impl-root choose the graded tree: give one")
        if impl_root is not None and not Path(impl_root).is_dir():
            raise pytest.UsageError(f"--impl-root: {impl_root} is not a directory")
        rehearse = config.getoption("rehearse")
        if rehearse and not config.getoption("gates"):
            raise pytest.UsageError("--rehearse rehearses the gate tests: give it with --gates")
        if rehearse and config.getoption("records"):
            raise pytest.UsageError("--rehearse writes its rows to a throwaway file of its own: leave out --records")
        return cls(
            registry=registry, chip=chip, solutions=solutions, impl_root=impl_root,
            interpret=config.getoption("interpret"), jax_cache=config.getoption("jax_cache"),
            gates=config.getoption("gates"), kernel_timeout=config.getoption("kernel_timeout"),
            cpu_devices=config.getoption("cpu_devices"), records=config.getoption("records"),
            hypothesis_profile=config.getoption("hypothesis_profile", None), rehearse=rehearse,
        )

    @property
    def chip_required(self) -> bool:
        """Gate records asked for, or a chip named: a chip this device cannot be is an error."""
        return self.gates or self.chip is not None


class CourseSession:
    """The run inside a course checkout. Build it with `from_config`."""

    def __init__(self, *, options: RunOptions, course: Course, tree: GradedTree,
                 run_backend: backend.Backend, gates: GateContext, chip: chips.Chip,
                 grading: GradingContext, hypothesis_profile: str, jax_cache: Path | None):
        self.options = options
        self.course = course
        self.tree = tree
        self.backend = run_backend
        self.gates = gates
        self.chip = chip  # the run's chip: the one gate records are for, else the default
        self.grading = grading
        self.hypothesis_profile = hypothesis_profile
        self.jax_cache = jax_cache
        self.progress = RunProgress(course)
        self._deselected_here: list[str] = []
        self._problem: str | None = None
        self._harness = None  # the gates' timing harness, made on first use on an accelerator
        self._reported: dict = {}  # (exercise, report without its reproduction) -> the test that had it
        self.exitstatus: int | None = None
        self.run_id = uuid.uuid4().hex
        self.guard = ToolkitGuard()
        self._calls_seen: dict[str, str] = {}  # node id -> how the session saw its call phase end
        self._foreign: list[str] = []  # plugins hooking reports, from this process and xdist workers
        self._imported_elsewhere: dict = {}  # graded modules imported on xdist workers
        self._foreign_fixtures: list[str] = []  # course fixtures the graded tests take from elsewhere
        self._test_files: dict[str, tuple] = {}  # exercise key -> ({test file: sha256}, shipped, why)
        self._marker: Path | None = None
        self._unfinished: list = []  # earlier runs that ended without their summary
        self._threads_before = leftovers.threads_at_start()
        self._threads_left: list[str] | None = None
        self._is_worker = False  # a pytest-xdist worker (set when the session starts)

    @classmethod
    def from_config(cls, config: pytest.Config, options: RunOptions | None = None) -> CourseSession | None:
        """The run's session, or None outside a course checkout (no course.toml at or above
        the rootdir). A bad option or course data is a pytest.UsageError."""
        options = options or RunOptions.from_config(config)
        root = find_course_root(config.rootpath)
        if root is None:
            if options.solutions or options.impl_root:
                raise pytest.UsageError(
                    f"--solutions/--impl-root need a course checkout: no course.toml at or above "
                    f"{config.rootpath}")
            return None
        _leave_libraries_unrewritten(config)
        try:
            course = load_course(root)
        except CourseDataError as error:
            raise pytest.UsageError(f"course data: {error}") from None
        from ..compiler import libtpu

        try:
            with libtpu.quiet_libtpu_startup():  # JAX's backends start here, libtpu with them
                backend.force_cpu_devices(options.cpu_devices)
                device = backend.device_facts()  # read once, before any graded module is imported
        except ValueError as error:
            if "CPU device" not in str(error):
                raise pytest.UsageError(_backend_failed(error)) from None
            raise pytest.UsageError(f"--cpu-devices: {error}") from None
        except Exception as error:  # JAX_PLATFORMS names a backend this machine lacks (cuda: an AssertionError)
            raise pytest.UsageError(_backend_failed(error)) from None
        profile = _load_hypothesis_profile(options.hypothesis_profile)
        tree = graded_tree(root, options.solutions, options.impl_root)
        run_backend = backend.select(options.interpret)
        jax_cache = backend.use_compilation_cache(
            None if options.jax_cache == "none" else root / options.jax_cache)
        kept = jax_cache if jax_cache is not None and jax_cache.is_dir() else None  # what JAX's cache cannot keep
        compiled.compile_kernel_programs(None if kept is None else kept / compiled.KERNEL_PROGRAM_CACHE)
        libtpu.keep_results_in(None if kept is None else kept / TPU_COMPILES)
        rehearsal = Rehearsal() if options.rehearse else None
        records_path = rehearsal.path if rehearsal else _records_path(options, root, tree)
        try:
            gates = gate_context(options.registry, options.chip, device, records_path, root,
                                 strict=options.chip_required, interpret_requested=options.interpret != "auto",
                                 kernels_native=run_backend.mode == "native", rehearsal=rehearsal)
        except chips.ChipMismatch as error:
            raise pytest.UsageError(f"--chip: {error}") from None
        try:
            deadline = Deadline(options.kernel_timeout)
        except ValueError as error:
            raise pytest.UsageError(f"--kernel-timeout: {error}") from None
        chip = gates.chip or options.registry.get(chips.DEFAULT_CHIP)
        vmem, lowering_chip = _kernel_chip_guards(chip, options.registry)
        grading = GradingContext(deadline=deadline, vmem=vmem, lowering_chip=lowering_chip)
        if tree.is_learners:  # what the learner's tree opens of solutions/, from its first import
            grading.solution_reads = solution_reads.watch(tree.root, root / SOLUTIONS)
        session = cls(options=options, course=course, tree=tree, run_backend=run_backend, gates=gates,
                      chip=chip, grading=grading, hypothesis_profile=profile, jax_cache=jax_cache)
        session.guard.bind()  # the checker and the gate runner, before any graded import
        leftovers.watch_forks()
        context.activate(session.grading)
        return session

    def close(self) -> None:
        """The run is over: JAX back as it was, the grading context no longer active.

        A graded call that could not be stopped (a compiled loop) still runs in a thread the
        interpreter would wait for at exit: the process ends here instead, the summary and
        the state file already written (pytest_unconfigure is the run's last hook).
        """
        CTRL_C.uninstall()
        # Threads are this run's to end only in a process of its own: not in a run inside another
        # (pytester in-process), nor on a pytest-xdist worker (whose controller reports it).
        alone = context.runs_in_progress() == 1 and not self._is_worker
        leftovers.stop_watching_forks()
        if self._marker is not None:  # no terminal summary in this run (-p no:terminal): it ends here
            run_markers.summary_written(self.course.root, self._marker)
            self._marker = None
        context.deactivate(self.grading)
        backend.restore()
        from ..compiler import libtpu

        compiled.stop_compiling_kernel_programs()  # each holds its kept folder to its size
        libtpu.keep_results_in(None)
        left = self.threads_left() if alone else []
        if left and self.exitstatus is not None:
            sys.stderr.write("".join(f"tpucourse: {thread} is still running: the run ends here, its results "
                                     f"already written\n" for thread in left))
        if (self.grading.deadline.left_running or left) and self.exitstatus is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(self.exitstatus))

    # ------------------------------------------------------------ what fixtures and hooks ask

    def threads_left(self) -> list[str]:
        """The non-daemon threads graded code started that are still running, each with what started
        it (asked once: the end of the run and its end-of-run record read the same answer)."""
        if self._threads_left is None:
            self._threads_left = leftovers.threads_left_by_the_run(self._threads_before, self.course.root)
        return self._threads_left

    def header_lines(self) -> list[str]:
        b = self.backend
        lines = [
            f"tpucourse: grading {self.tree.describe(self.course.root)}",
            f"tpucourse: kernels run under {b.describe_mode}",
            f"tpucourse: backend {b.platform} ({b.device_kind}, {b.device_count} "
            f"device{'s' if b.device_count != 1 else ''}), jax {b.jax_version}, "
            f"jaxlib {b.jaxlib_version}, hypothesis profile {self.hypothesis_profile}, "
            f"compilation cache {self.jax_cache or 'off'}",
        ]
        if self.gates.rehearsal is not None:
            lines.append(self.gates.rehearsal.header_line(self.gates.chip.name, self.gates.device_kind))
        elif self.options.gates:
            if not self.gates.on_accelerator:
                where = "predicted only: nothing is timed off-chip"
            elif self.gates.interpret_requested:
                where = f"on {self.gates.device_kind}, but interpret mode: nothing is timed"
            else:
                where = f"measured on {self.gates.device_kind}"
            lines.append(f"tpucourse: gates for chip {self.gates.chip.name} ({where}); records "
                         f"{shown(self.gates.records_path, self.course.root)} (rows of {self.tree_label})")
            if self.gates.on_accelerator and self.gates.interpret_requested:
                lines.append(f"tpucourse: WARNING --interpret {self.options.interpret} on "
                             f"{self.gates.device_kind}: gate speed criteria are not timed in this run")
        lines += [f"tpucourse: WARNING {run.describe()}" for run in self._unfinished]
        return lines

    @property
    def tree_label(self) -> str:
        return tree_label(self.tree.kind, self.tree.root, self.course.root)

    def implementation(self, path: Path) -> Implementation:
        """The graded tree's modules for the chapter of the test file at `path`."""
        chapter = self.course.chapter_of_path(path)
        if chapter is None:
            pytest.fail(f"{path}: impl grades files under exercises/chNN/ of a chapter in course.toml",
                        pytrace=False)
        return Implementation(self.tree, self.course, chapter.id, self.grading)

    def gate_run(self, item: pytest.Item, path: Path, store) -> GateRun:
        """The object a @gate test measures and records with.

        Its thresholds and device are the ones captured when the run started; its rows carry
        the graded tree, and, when the test grades code (asks for `impl`), the sha256 of each
        module of the chapter it grades.
        """
        from ..gates import timer

        gates = self.gates
        if gates.chip is None:
            raise pytest.UsageError(f"{item.nodeid}: no chip for gate records: pass --chip")
        number = markers.gate_number(item)
        chapter = self.course.chapter_of_path(path)
        chapter_id = chapter.id if chapter else gate(number).chapter
        label = self.tree_label
        modules = (self._imported_hashes(chapter_id, label) if "impl" in getattr(item, "fixturenames", ()) else {})
        if gates.rehearsal is not None:
            self._harness, store = gates.rehearsal.harness, KeptFromBenchmark(store)
        elif gates.on_accelerator and self._harness is None:
            self._harness = timer.harness_for(gates.platform)
        return GateRun(gates, gate=number, chapter=chapter_id, test_id=item.nodeid,
                       provenance=provenance(gates.platform, gates.device_kind, self.course.root, label, modules),
                       harness=self._harness, store=store, marker_cost=markers.roofline_cost(item),
                       live_device=backend.device_facts, tree_root=self.tree.root)

    def gate_test_outcome(self, results) -> tuple[str, str] | None:
        """A gate test's outcome from its results; a rehearsal's fails only on errors in its path."""
        from ..gates import rehearsal
        from ..gates.run import test_outcome

        return (rehearsal.test_outcome if self.gates.rehearsal is not None else test_outcome)(results)

    def _imported_hashes(self, chapter_id: str, label: str) -> dict[str, str]:
        """The sha256 of each graded module of the chapter as this run imports it (imported now
        where it was not yet: the row must name the code that runs, not the file at the end)."""
        chapter_dir = self.tree.chapter_dir(chapter_id)
        shown_as = f"{label.removeprefix('impl-root:')}/{chapter_id}"
        modules = module_hashes(chapter_dir, shown_as)
        graded = Implementation(self.tree, self.course, chapter_id, self.grading)
        for path in sorted(Path(chapter_dir).glob("*.py")):
            shown = f"{shown_as}/{path.name}"
            if shown not in modules:
                continue
            try:
                getattr(graded, path.stem).load()
            except LearnerCodeError:
                pass  # the test's own call reports it
            modules[shown] = self.grading.imported.get(str(path.resolve()), modules[shown])
        return modules

    def seed_examples(self, item: pytest.Item) -> None:
        """A graded property test draws the same examples, run after run, until the graded
        module of its exercise changes: a fix is judged on the cases that failed before it
        (hypothesis' example database replays those first), and a new version of the file
        gets new cases. The seed is the test's id and the module's contents; --hypothesis-seed
        given on the command line wins."""
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)
        exercise = self.progress.exercise_of(item.nodeid)
        if (exercise is None or not getattr(test, "is_hypothesis_test", False)
                or item.config.getoption("hypothesis_seed", None) is not None):
            return
        from hypothesis import seed

        module = self.tree.module_path(exercise.chapter, exercise.name)
        digest = hashlib.sha256(item.nodeid.encode() + (state.file_digest(module) or "").encode()).hexdigest()
        seed(int(digest[:16], 16))(test)

    def collected(self, items: list[pytest.Item]) -> None:
        """Graded tests in course order; progress learns what this run holds, and which of its
        graded test files are the course's as shipped."""
        self.progress.sort_in_course_order(items)
        self.progress.collected(item.nodeid for item in items)
        files: dict[str, dict[str, bytes]] = {}  # exercise key -> {test file: bytes as collected}
        for item in items:
            exercise = self.progress.exercise_of(item.nodeid)
            if exercise is not None:
                relative = item.nodeid.split("::", 1)[0]
                if relative not in files.setdefault(exercise.key, {}):
                    files[exercise.key][relative] = Path(item.path).read_bytes()
        if self._marker is not None:
            run_markers.collected(self._marker, [f for found in files.values() for f in found])
        if not (files and self.tree.is_learners):
            return
        blobs = shipped.head_blobs(self.course.root, ("exercises",))
        for key, found in files.items():
            changed = shipped.changed_from_shipped(found, blobs)
            self._test_files[key] = (
                {path: shipped.sha256(data) for path, data in found.items()},
                None if changed is None else not changed,
                f"{', '.join(changed)} differ{'s' if len(changed or ()) == 1 else ''} from the course's "
                f"(git HEAD): only the course's graded tests count (git checkout -- <file> restores them)"
                if changed else "")

    def _tests_as_collected(self) -> None:
        """Progress learns the graded test files once its entries exist (after the reports; under
        xdist the controller collects nothing and hears them from its workers)."""
        for key, (hashes, is_shipped, why) in self._test_files.items():
            self.progress.tests_as_collected(key, hashes, is_shipped, why)

    # ------------------------------------------------------------ reports (a registered plugin)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        CTRL_C.install()
        if _selection_may_drop_tests(session.config):
            self.progress.some_tests_unseen()
        self._is_worker = getattr(session.config, "workerinput", None) is not None
        if not self._is_worker and self.tree.is_learners:  # the learner's own run (xdist's controller or plain)
            self._unfinished = run_markers.ended_without_summary(self.course.root)
            try:
                self._marker = run_markers.start(self.course.root, self.run_id, session.config.args, self.tree.kind)
            except OSError:
                self._marker = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.guard.watch_loaded()  # the toolkit the graded tests imported, before graded code runs
        graded = [item for item in session.items if self.progress.exercise_of(item.nodeid) is not None]
        self._foreign_fixtures = foreign_plugins.foreign_fixtures(graded, self._shipped_conftest)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item):
        """The outermost view of the test's call: how it ended (a pass counts only if the test
        returned here), and whether the course's checks were changed while it ran."""
        seen = "raised"
        try:
            result = yield
            seen = "returned"
            return result
        except BaseException as error:
            seen = f"raised {type(error).__name__}"
            raise
        finally:
            leftovers.end_forked_child()
            item.stash[CALL_SEEN] = self._calls_seen[item.nodeid] = seen
            graded = "impl" in getattr(item, "fixturenames", ()) or self.progress.exercise_of(item.nodeid)
            changed = self.guard.restore_changed() if graded else []
            if changed and seen == "returned":
                self._calls_seen[item.nodeid] = item.stash[CALL_SEEN] = "raised LearnerCodeError"
                raise LearnerCodeError(
                    f"the course's checks were changed while this test ran ({', '.join(changed[:5])}): graded "
                    f"code may not change the course's code, so the test fails; they are restored for the "
                    f"tests that follow.")

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        leftovers.end_forked_child()
        CTRL_C.check()  # a Ctrl-C that JAX swallowed during the test stops the run now

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        CTRL_C.handled()

    def reported(self, item: pytest.Item, report: pytest.TestReport, outcome: bool) -> None:
        """Give a failed report its headline; a graded test failing exactly as an earlier test of
        the same exercise did gets one line pointing there instead of the whole report again."""
        crash = getattr(report.longrepr, "reprcrash", None)
        headline = getattr(report, "tpucourse_headline", None) or (
            first_line(crash.message) if crash is not None else first_line(report.longreprtext))
        report.tpucourse_headline = headline
        exercise = self.progress.exercise_of(report.nodeid)
        if not outcome or exercise is None:
            return
        key = (exercise.key, without_reproduction(str(report.longrepr)))
        earlier = self._reported.setdefault(key, item.name)
        if earlier != item.name:
            report.longrepr = f"{headline}\n  (the same report as {earlier} above)"

    def pytest_deselected(self, items) -> None:
        ids = [item.nodeid for item in items]
        self._deselected_here.extend(ids)
        self.progress.deselected(ids)

    # Tests deselected on an xdist worker (-k, --lf) are invisible to the controller, so each
    # worker sends their ids back in its workeroutput and the controller counts them as
    # deselected: an exercise with deselected tests is never done.

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.progress.collected(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.progress.deselected(output.get(WORKER_DESELECTED, ()))
        self._foreign = sorted(set(self._foreign) | set(output.get(WORKER_FOREIGN, ())))
        self._imported_elsewhere.update(output.get(WORKER_IMPORTED, {}))
        for key, (hashes, is_shipped, why) in output.get(WORKER_TEST_FILES, {}).items():
            known = self._test_files.get(key)
            if known is None or known[1] is not False:  # a worker that saw a changed file has the last word
                self._test_files[key] = (hashes, is_shipped, why)
        if self._marker is not None and output.get(WORKER_TEST_FILES):
            run_markers.collected(self._marker, [f for hashes, _, _ in self._test_files.values() for f in hashes])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        leftovers.end_forked_child()
        if self.gates.rehearsal is not None:
            self.gates.rehearsal.ended_report(report)
        if report.when == "call" and report.passed:
            seen = self._calls_seen.get(report.nodeid) or getattr(report, "tpucourse_call", None)
            if seen != "returned":
                self.progress.refuse(report.nodeid, f"reported as passed, but the course saw its test "
                                                    f"{seen or 'not run'}: a plugin changed the report")
                return
        if report.skipped:
            made_by = self._skip_made_by(report)
            if made_by is not None:
                self.progress.refuse(report.nodeid, f"skipped by {made_by}, not by the course: a skip counts "
                                                    f"only where the course makes it", skipped=True)
                return
        # pytest-xdist puts "[gw0] <platform> -- Python ..." above a worker's failure text.
        message = re.sub(r"\A\[gw\d+\] [^\n]*\n", "", report.longreprtext) if report.failed else ""
        self.progress.record(report, is_todo=getattr(report, "tpucourse_todo", False),
                             message=getattr(report, "tpucourse_headline", None) or first_line(message))

    def _skip_made_by(self, report: pytest.TestReport) -> str | None:
        if hasattr(report, "wasxfail"):
            return "an xfail"
        return getattr(report, "tpucourse_skip_by", None)

    def skip_made_by(self, item: pytest.Item, error: BaseException) -> str | None:
        """Where a skip the course did not make came from; None for the course's: the plugin's
        own (no libtpu, too few devices, gate tests off-chip), a graded test file's, or a skip
        mark written in one (not one a conftest added)."""
        caller = None
        tb = error.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if not (frame.f_locals.get("__tracebackhide__") or frame.f_globals.get("__tracebackhide__")):
                caller = Path(os.path.abspath(frame.f_code.co_filename))
            tb = tb.tb_next
        if caller is None:
            return None
        if caller.is_relative_to(_PACKAGE) or caller == Path(os.path.abspath(item.path)):
            return None
        if caller.name == "skipping.py" and "_pytest" in caller.parts:  # a skip or skipif mark
            written = []
            for holder in (getattr(item, "obj", None), getattr(item, "cls", None), getattr(item, "module", None)):
                marks = getattr(holder, "pytestmark", None) or ()
                written += marks if isinstance(marks, (list, tuple)) else [marks]  # one mark or a list
            if any(getattr(m, "name", "") in ("skip", "skipif") for m in written) \
                    or str(getattr(error, "msg", "")).startswith(markers.GATE_TESTS_SKIPPED):
                return None
            return "a skip mark a plugin or conftest added"
        return shown(caller, self.course.root)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        """A worker hands back its deselections; the process that saw every report (a plain
        run, or the xdist controller) saves a run of exercises/ to the state file."""
        self.exitstatus = int(session.exitstatus)
        foreign = (foreign_plugins.foreign_report_hooks(session.config.pluginmanager, self._shipped_conftest)
                   + self._foreign_fixtures)
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_DESELECTED] = self._deselected_here
            workeroutput[WORKER_FOREIGN] = foreign
            workeroutput[WORKER_IMPORTED] = dict(self.grading.imported)
            workeroutput[WORKER_TEST_FILES] = {key: list(value) for key, value in self._test_files.items()}
            return
        self._tests_as_collected()
        self._foreign = sorted(set(self._foreign) | set(foreign))
        if self._foreign:
            self.progress.count_nothing(f"plugins outside pytest's and the course's hook how tests are collected, "
                                        f"run or reported "
                                        f"({'; '.join(shown_in_text(f, self.course.root) for f in self._foreign)})")
        if self.tree.is_learners and self.progress.results and self.gates.rehearsal is None:
            try:
                state.record_results(self.course, self.progress.results, self.run_id,
                                     {**self._imported_elsewhere, **self.grading.imported},
                                     worked_in=next_up.chapter_worked_in)
            except (OSError, state.CorruptState) as error:
                self._problem = f"progress not saved: {error}"

    def _shipped_conftest(self, path: Path) -> bool:
        """A conftest.py of the course as shipped (its bytes are git HEAD's)."""
        try:
            relative = Path(path).resolve().relative_to(Path(self.course.root).resolve()).as_posix()
            data = Path(path).read_bytes()
        except (ValueError, OSError):
            return False
        folder = relative.split("/", 1)[0] if "/" in relative else "."
        changed = shipped.changed_from_shipped({relative: data}, shipped.head_blobs(self.course.root, (folder,)))
        return changed == []

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter, exitstatus, config: pytest.Config) -> None:
        try:
            self._summary(terminalreporter)
        finally:
            if self._marker is not None:
                run_markers.summary_written(self.course.root, self._marker)
                self._marker = None

    def _summary(self, terminalreporter) -> None:
        if self._problem:
            terminalreporter.write_line(f"tpucourse: {self._problem}", red=True)
        if self.gates.rehearsal is not None:  # no status is read from a rehearsal's rows
            terminalreporter.write_sep("=", "tpucourse rehearsal")
            for line in self.gates.rehearsal.summary_lines(self.options.registry, self.gates.gates):
                terminalreporter.write_line(line)
            return
        if self.progress.run_not_counted:
            terminalreporter.write_line(f"tpucourse: this run counts nothing as done: {self.progress.run_not_counted}; "
                                        f"run without them (-p no:NAME, or remove the conftest hook)", red=True)
        for run in self._unfinished:
            terminalreporter.write_line(f"tpucourse: {run.describe()}", red=True)
        show_gates = self.options.gates and self.gates.chip is not None
        if not (self.progress.results or show_gates):
            return
        terminalreporter.write_sep("=", "tpucourse")
        loaded = report.load([self.gates.records_path], self.options.registry, tree=self.tree_label,
                             gates=self.gates.gates)
        for line in loaded.problems()[:20]:
            terminalreporter.write_line(f"gate records: {shown_in_text(line, self.course.root)}", red=True)
        if loaded.problems():
            terminalreporter.write_line(f"gate records: {len(loaded.problems())} bad lines or rejected rows, "
                                        f"not counted; see `tpucourse records check`", red=True)
        current = (report.current_modules(self.course.root, self.tree_label)  # statuses follow the code
                   if self.tree_label in (EXERCISES, SOLUTIONS) else None)
        passed = report.gates_passed(loaded.accepted, current=current, course_root=self.course.root,
                                     gates=self.gates.gates)
        if show_gates:
            for line in report.gate_table_lines(loaded.accepted, self.gates.chip.name, current=current,
                                                course_root=self.course.root,
                                                tree=self.tree_label, gates=self.gates.gates):
                terminalreporter.write_line(line)
        learner_state = None
        if self.tree.is_learners and not self._problem:
            try:
                learner_state = state.read(self.course.root)
            except state.CorruptState as error:
                terminalreporter.write_line(f"tpucourse: {error}", red=True)
        for line in self.progress.summary_lines(self.tree.describe(self.course.root),
                                                learner_state=learner_state, learner_tree=self.tree.is_learners,
                                                gates_passed=passed, only_ran=self.options.gates):
            terminalreporter.write_line(line)


def _backend_failed(error: Exception) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    platforms = os.environ.get("JAX_PLATFORMS")
    named = f"JAX_PLATFORMS={platforms}" if platforms else "JAX_PLATFORMS"
    return (f"JAX could not start its backend ({first}); check {named}: it must name platforms this machine "
            f"has (cpu; JAX_PLATFORMS=tpu needs a TPU and jax[tpu], JAX_PLATFORMS=cuda a GPU and jax[cuda]), "
            f"or be unset")


def _records_path(options: RunOptions, root: Path, tree: GradedTree) -> Path:
    """--records, else .tpucourse/records.jsonl (untracked). The course's published file takes
    only rows of its reference solutions."""
    path = Path(options.records) if options.records else root / rec.DEFAULT_PATH
    published = (root / rec.PUBLISHED_PATH).resolve()
    if path.resolve() == published and tree.kind != "solutions":
        raise pytest.UsageError(f"--records {options.records}: {rec.PUBLISHED_PATH} holds the course's records of "
                                f"its reference solutions (--solutions); rows of {tree.kind} go to "
                                f"{rec.DEFAULT_PATH}")
    return path


def run_chip(config: pytest.Config) -> str:
    """The chip this run is for: the session's, or outside a course --chip or the default."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        return session.chip.name
    return config.stash[OPTIONS].chip or chips.DEFAULT_CHIP


def _kernel_chip_guards(chip: chips.Chip, registry: chips.ChipRegistry) -> tuple[VmemBudget, str]:
    """The VMEM budget a kernel's scratch must fit, and the TPU the lowering check targets.

    Both are the run's chip where it is a TPU (where JAX has no figures for it, the lowering
    targets the default chip); off a TPU chip, the default chip's.
    """
    tpu = chip if chip.kind == "tpu" else registry.get(chips.DEFAULT_CHIP)
    lowering = tpu.name if tpu.name in chips.JAX_CHIP_VERSIONS else chips.DEFAULT_CHIP
    return VmemBudget(tpu.name, tpu.vmem_bytes), lowering


def _load_hypothesis_profile(requested: str | None) -> str:
    """Register the course's profiles and load the requested one (or the default)."""
    from ..core import profiles

    return profiles.load(requested)


# Packages pytest marks for assert rewriting because they ship a pytest plugin; their asserts
# are not the graded tests' (those, and conftests, are still rewritten). Rewriting parses and
# recompiles every module at import, and where bytecode is not written (PYTHONDONTWRITEBYTECODE)
# it does so in every run: about 0.7 s of a run's start (docs/speed.md).
_NOT_REWRITTEN = ("hypothesis", "_hypothesis_globals", "_hypothesis_ftz_detector", "pytest_tpucourse")


def _leave_libraries_unrewritten(config: pytest.Config) -> None:
    """Import hypothesis and the course's toolkit as plain modules (pytest's private rewrite hook:
    a pytest without it rewrites them, as before)."""
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set):
        marked.difference_update(_NOT_REWRITTEN)
        getattr(hook, "_marked_for_rewrite_cache", {}).clear()


def _selection_may_drop_tests(config: pytest.Config) -> bool:
    """--lf with known failures drops passed tests while collecting, without deselecting
    them; `file.py::test` arguments collect only part of a file. Either way no exercise
    may be claimed done."""
    if any("::" in str(arg) for arg in config.args):
        return True
    lastfailed = config.pluginmanager.get_plugin("lfplugin")
    return bool(config.getoption("lf", False) and lastfailed is not None
                and getattr(lastfailed, "lastfailed", None))
