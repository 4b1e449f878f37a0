"""One pytest run of the course: its state, built once from the config, and its end.

Inside a course checkout `CourseSession.from_config` builds the run: the course, the
graded tree, the backend, the chip (resolved once: gate records, roofline markers, the
VMEM budget and the TPU lowering check all read it), the grading context (the deadline,
the VMEM budget and the run's caches) and the run's progress. It binds the checker before
any graded import (grading/toolkit_guard.py) and `close` ends the run (docs/earned.md).

The session holds state and is no plugin: pytest's hooks read and change it from the
modules beside this one, one concern each (plugin.py names them): graded_call.py (each
test's call), collection.py, reports.py, summary.py (the header and the closing summary),
lifecycle.py (the run's start, its xdist workers, its end) and gate_tests.py, with the
fixtures in fixtures.py. Importing this module loads no JAX, NumPy or hypothesis:
building the session does.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from pathlib import Path

import pytest

from .. import chips
from ..core.course import SOLUTIONS, Course, CourseDataError, find_course_root, load_course
from ..gates import judge
from ..gates import records as rec
from ..gates import sweeps
from ..gates.provenance import tree_label
from ..gates.rehearsal import Rehearsal
from ..gates.run import GateContext, gate_context
from ..grading import backend, compiled, context, leftovers, placement, solution_reads
from ..grading.context import GradingContext
from ..grading.deadline import Deadline
from ..grading.interrupts import CTRL_C
from ..grading.toolkit_guard import ToolkitGuard
from ..grading.tree import GradedTree, graded_tree
from ..grading.vmem import VmemBudget
from ..learner import run_markers
from ..learner.progress import RunProgress
from .options import OPTIONS, RunOptions

AHEAD_ENV = "TPUCOURSE_AHEAD"  # "0": a warm process compiles nothing ahead of a run's calls (grading/ahead.py)

SESSION = pytest.StashKey["CourseSession"]()
CALL_SEEN = pytest.StashKey[str]()  # how the graded call's wrapper saw a test's call phase end: "returned", "raised ..."
GATE_RESULTS = pytest.StashKey[list]()  # a gate test's results (its gate_run), read when its report is made
# The keys under which an xdist worker hands the controller what it saw.
WORKER_DESELECTED = "tpucourse_deselected"  # the test ids it deselected
WORKER_FOREIGN = "tpucourse_foreign_hooks"  # its plugins that hook reports
WORKER_IMPORTED = "tpucourse_imported"  # its graded modules: path -> sha256 of the bytes imported
WORKER_UNITS = "tpucourse_units"  # each exercise's unit: key -> {file: sha256} (grading/unit_files.py)
WORKER_TEST_FILES = "tpucourse_test_files"  # its graded test files: key -> [{path: sha256}, shipped, why]
TPU_COMPILES = "tpu-compiles"  # the folder of --jax-cache keeping compiles for a described TPU


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
        self.run_id = uuid.uuid4().hex
        self.guard = ToolkitGuard()
        self.exitstatus: int | None = None
        self.is_worker = False  # a pytest-xdist worker (set when the session starts)
        self.problem: str | None = None  # said at the top of the summary (progress not saved)
        self.harness = None  # the gates' timing harness, made on first use on an accelerator
        self.gate_progress = None  # a --gates run's progress and times (gate_progress.py), where it prints
        self.device_run_note: str | None = None  # what became of this run's line in bench/device_runs.jsonl
        self.calls_seen: dict[str, str] = {}  # node id -> how the graded call's wrapper saw its call end
        self.failures_reported: dict = {}  # (exercise, messages.same_failure of a report) -> reports.FirstReport
        self.deselected_here: list[str] = []  # node ids this process deselected
        self.foreign: list[str] = []  # plugins hooking reports, from this process and xdist workers
        self.foreign_fixtures: list[str] = []  # course fixtures the graded tests take from elsewhere
        self.imported_on_workers: dict = {}  # graded modules imported on xdist workers
        self.units_on_workers: dict = {}  # exercise key -> {file: sha256} its tests ran on workers
        self.test_files: dict[str, tuple] = {}  # exercise key -> ({test file: sha256}, shipped, why)
        self.devices_declared: dict[str, int] = {}  # node id -> its devices marker (the mesh fixture's bound)
        self.host_cpu = None  # on a TPU: the host-CPU half of the run (host_cpu.HostCpuRuns), if any test is placed there
        self.marker: Path | None = None  # this run's marker (learner/run_markers.py) until its summary
        self.unfinished: list = []  # earlier runs that ended without their summary
        self._threads_before = leftovers.threads_at_start()
        self._threads_left: list[str] | None = None

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

        _on_the_hosts_cpu(config, options)
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
        # A kernel compiled anew in a tree whose earlier runs compiled for a TPU: that compile will
        # miss its kept result too, so the compiling child starts now, beside the tests before it.
        tpu_compiles = None if kept is None else kept / TPU_COMPILES
        compiles_for_tpu = tpu_compiles is not None and tpu_compiles.is_dir() and any(tpu_compiles.iterdir())
        compiled.compile_kernel_programs(None if kept is None else kept / compiled.KERNEL_PROGRAM_CACHE,
                                         on_first_compile=libtpu.start_compiler_ahead if compiles_for_tpu else None)
        libtpu.keep_results_in(tpu_compiles)
        rehearsal = Rehearsal() if options.rehearse else None
        records_path = rehearsal.path if rehearsal else _records_path(options, root, tree)
        try:
            gates = gate_context(options.registry, options.chip, device, records_path, root,
                                 strict=options.chip_required, interpret_requested=options.interpret != "auto",
                                 kernels_native=run_backend.mode == "native", rehearsal=rehearsal,
                                 sweeps_path=sweeps.path_for(root, rehearsal.path if rehearsal else None),
                                 course_sweeps_path=sweeps.course_path_for(root, rehearsal.path if rehearsal else None),
                                 resweep=options.resweep, finish_searches=options.finish_searches)
            gates = dataclasses.replace(gates, gates=judge.snapshot(  # gate 05's slots: the tree's
                tree.root, reference=tree.kind == SOLUTIONS))
        except chips.ChipMismatch as error:
            raise pytest.UsageError(f"--chip: {error}") from None
        try:
            deadline = Deadline(options.kernel_timeout)
        except ValueError as error:
            raise pytest.UsageError(f"--kernel-timeout: {error}") from None
        chip = gates.chip or options.registry.get(chips.DEFAULT_CHIP)
        kernel_chip = _kernel_chip(chip, options.registry)
        grading = GradingContext(deadline=deadline, vmem=VmemBudget(kernel_chip), chip=kernel_chip,
                                 registry=options.registry,
                                 native_tpu=placement.Host(run_backend.platform, run_backend.mode == "native",
                                                           run_backend.device_count).native_tpu)
        from ..learner import served_runs

        grading.in_warm_process = served_runs.SERVING
        if served_runs.SERVING and run_backend.platform == "cpu" and os.environ.get(AHEAD_ENV) != "0":
            from ..grading.ahead import Ahead

            grading.ahead = Ahead((tuple(config.invocation_params.args), str(config.invocation_params.dir),
                                   str(tree.root)), grading)
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
        alone = context.runs_in_progress() == 1 and not self.is_worker
        leftovers.stop_watching_forks()
        if self.marker is not None:  # no terminal summary in this run (-p no:terminal): it ends here
            run_markers.summary_written(self.course.root, self.marker)
            self.marker = None
        if self.grading.ahead is not None:  # before the threads left are counted
            self.grading.ahead.end()
        context.deactivate(self.grading)
        backend.restore()
        from ..compiler import libtpu

        compiled.stop_compiling_kernel_programs()  # each holds its kept folder to its size
        libtpu.release_compiles_held()  # kept in the folder of this run, for the next
        libtpu.forget_exports()
        libtpu.keep_results_in(None)
        libtpu.forget_compiles_ahead()
        left = self.threads_left() if alone else []
        if left and self.exitstatus is not None:
            sys.stderr.write("".join(f"tpucourse: {thread} is still running: the run ends here, its results "
                                     f"already written\n" for thread in left))
        if (self.grading.deadline.left_running or left) and self.exitstatus is not None:
            from ..learner import served_runs

            sys.stdout.flush()
            sys.stderr.flush()
            why = ("a graded call that passed its deadline is still running (a kernel or loop that could not "
                   "be stopped)" if self.grading.deadline.left_running else f"threads still running: {', '.join(left)}")
            try:
                served_runs.before_process_exit(int(self.exitstatus), why)
            finally:  # whatever raises meanwhile (a late Ctrl-C), the process cannot exit normally: it ends here
                os._exit(int(self.exitstatus))

    def take_worker_output(self, output: dict) -> None:
        """What a worker handed back at its end (a pytest-xdist worker, or a host-CPU child: host_cpu.py)."""
        self.progress.deselected(output.get(WORKER_DESELECTED, ()))
        self.foreign = sorted(set(self.foreign) | set(output.get(WORKER_FOREIGN, ())))
        self.imported_on_workers.update(output.get(WORKER_IMPORTED, {}))
        for key, files in output.get(WORKER_UNITS, {}).items():
            self.units_on_workers.setdefault(key, {}).update(files)
        for key, (hashes, is_shipped, why) in output.get(WORKER_TEST_FILES, {}).items():
            known = self.test_files.get(key)
            if known is None or known[1] is not False:  # a worker that saw a changed file has the last word
                self.test_files[key] = (hashes, is_shipped, why)
        if self.marker is not None and output.get(WORKER_TEST_FILES):
            run_markers.collected(self.marker, [f for hashes, _, _ in self.test_files.values() for f in hashes])

    def exercise_units(self) -> dict[str, dict[str, str]]:
        """Each exercise's unit (grading/unit_files.py): {file: sha256} of every file of the tree
        that the graded modules its tests used ran, here and on the workers."""
        units = {key: dict(files) for key, files in self.units_on_workers.items()}
        for key, modules in self.grading.exercise_modules.items():
            units.setdefault(key, {}).update(self.grading.unit_of(modules))
        return units

    def threads_left(self) -> list[str]:
        """The non-daemon threads graded code started that are still running, each with what started
        it (asked once: the end of the run and its end-of-run record read the same answer)."""
        if self._threads_left is None:
            self._threads_left = leftovers.threads_left_by_the_run(self._threads_before, self.course.root)
        return self._threads_left

    @property
    def tree_label(self) -> str:
        return tree_label(self.tree.kind, self.tree.root, self.course.root)


def run_chip(config: pytest.Config) -> chips.Chip:
    """The chip this run is for: the session's, or outside a course --chip or the default."""
    session = config.stash.get(SESSION, None)
    if session is not None:
        return session.chip
    options = config.stash[OPTIONS]
    return options.registry.get(options.chip or chips.DEFAULT_CHIP)


def _on_the_hosts_cpu(config: pytest.Config, options: RunOptions) -> None:
    """--interpret tpu or fast, and a host-CPU child (run/host_cpu.py), run on the host's CPU, on a TPU
    host too: JAX's TPU interpreter cannot run its two-core checks in a process that holds a TPU
    (grading/placement.py). Where JAX_PLATFORMS is set, it wins. Before JAX's backends start."""
    from . import host_cpu

    if options.interpret == "auto" and not host_cpu.is_child(config):
        return
    if os.environ.get("JAX_PLATFORMS"):
        return
    import jax

    jax.config.update("jax_platforms", "cpu")


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


def _kernel_chip(chip: chips.Chip, registry: chips.ChipRegistry) -> chips.Chip:
    """The TPU a kernel's checks target off a TPU: its VMEM budget, the Mosaic lowering, the real
    compiler and its figures. The run's chip where it is a TPU (where JAX has no lowering rules for
    it, the lowering takes the default chip's: readers/mosaic.py); off a TPU chip, the default."""
    return chip if chip.kind == "tpu" else registry.get(chips.DEFAULT_CHIP)


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


