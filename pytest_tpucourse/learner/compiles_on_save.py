"""A warm process compiles a saved kernel's programs before the learner's run asks for them.

Between two runs of a learner's loop a warm process (served_runs.py) has nothing to do, and the
next run will compile, for the learner's new code, the programs the last run compiled
(grading/ahead.py remembers them). So it watches the files of the graded modules the last run
called (`SavedFiles`), and once one is saved it compiles those programs at once (`compile_saved`,
on a thread of its own), into the kept kernel programs the run loads by JAX's cache key
(core/jax_internals.py). The run then finds each program compiled, or waits for the one under
way, instead of compiling it after the learner asked.

Nothing of this reaches a run's verdict: a kept program is found only by the exact text of the
program the run itself traced and lowered, and the run makes every check itself. The modules are
imported under a package of their own, never the one the run imports them by, in interpret mode
set for this thread alone, and the files they open count in no unit (unit_files.recording_apart).
Whatever the learner's code does here (an error, a file half written by an editor) ends the
guess and nothing else; what it changes in the process (a library patched, a JAX flag set, a
thread left) ends the warm process, as it does after a run (warm_process.reasons_to_end).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading

logger = logging.getLogger(__name__)

LOOK_SECONDS = 0.05  # how often an idle warm process looks at the files
LONGEST_SECONDS = 120.0  # compiles still running after this: learner code that does not return
PACKAGE_KIND = "saved"  # graded_tree-like package names: _tpucourse_graded_saved_<digest>
ENV = "TPUCOURSE_COMPILE_ON_SAVE"  # "0": a warm process compiles nothing before it is asked


class SavedFiles:
    """The graded modules' files the last run called, and whether one was saved since."""

    def __init__(self, calls):
        self.files = sorted({call.module for call in calls})
        self.stamps = self._stamps()

    def _stamps(self) -> dict:
        stamps = {}
        for path in self.files:
            try:
                info = os.stat(path)
            except OSError:
                stamps[path] = None
            else:
                stamps[path] = (info.st_mtime_ns, info.st_size)
        return stamps

    def saved_since(self, began_ns: int) -> None:
        """A file written at or after `began_ns` (during the run that imported it, or after its
        answer, before this watch began) is one the next look sees as saved."""
        for path, stamp in self.stamps.items():
            if stamp is not None and stamp[0] >= began_ns:
                self.stamps[path] = (-1, -1)

    def saved(self) -> bool:
        """Whether a file changed since the last look (each change is told once). An empty file is
        an editor's save half done (truncated, not yet written): it is looked at again, whole."""
        now = self._stamps()
        if any(stamp is not None and stamp[1] == 0 for stamp in now.values()):
            return False
        changed, self.stamps = now != self.stamps, now
        return changed


class CompilesOnSave:
    """The watch a warm process keeps between runs: `look()` from its idle loop."""

    def __init__(self, report=None):
        self.report = report  # report(line): what a compile on save did, for the process's log
        self.saved_files: SavedFiles | None = None
        self.plan: tuple | None = None
        self.thread: threading.Thread | None = None
        self.again = False  # saved again while a compile ran: compile once more after it
        self.finished = threading.Event()  # a compile ended since the process last checked itself
        self.run_started = threading.Event()  # a run began: it traces the rest itself
        self.started_at = 0.0
        self.run_began_ns = 0  # when the last run began (time.time_ns), files' times compared with it

    def after_run(self) -> None:
        """Watch the files of the calls the run made (grading/ahead.py's record of it)."""
        from ..grading import ahead

        last = ahead.last_run()
        if os.environ.get(ENV) == "0" or last is None or not last[0]:
            self.saved_files, self.plan = None, None
            return
        watched, self.plan = SavedFiles(last[0]), last
        if self.saved_files is not None and self.saved_files.files == watched.files:
            # As last looked at, before the run: a file saved while it ran is a save the next look sees.
            watched.stamps = self.saved_files.stamps
        elif self.run_began_ns:  # first watched now, once the run has answered: one saved since it began is a save
            watched.saved_since(self.run_began_ns)
        self.saved_files = watched

    def look(self) -> None:
        """A saved file starts the compiles (one thread at a time; a save meanwhile, once more after)."""
        if self.saved_files is None or not self.saved_files.saved():
            return
        if self.thread is not None and self.thread.is_alive():
            self.again = True
            return
        self._start()

    def _start(self) -> None:
        import time

        calls, policy = self.plan
        self.again = False
        self.run_started.clear()
        self.started_at = time.monotonic()
        self.thread = threading.Thread(target=self._compile, args=(calls, policy), daemon=True,
                                       name="tpucourse-compiles-on-save")
        self.thread.start()

    def _compile(self, calls, policy) -> None:
        import time

        started = time.monotonic()
        names = ", ".join(sorted({os.path.basename(call.module) for call in calls}))
        try:
            try:
                done = compile_saved(calls, policy, self.run_started)
            except Exception as error:  # this module's own mistake: the run compiles for itself
                if self.report is not None:
                    self.report(f"{names} saved: compiling it failed ({type(error).__name__}: {error}); "
                                "the next run compiles its programs itself")
                raise
            if self.report is not None:
                self.report(f"{names} saved: {done} of the last run's {len(calls)} programs compiled for it "
                            f"in {time.monotonic() - started:.1f} s"
                            + (", the rest by the run that began meanwhile" if self.run_started.is_set() else ""))
        finally:
            self.finished.set()
            if self.again and self.saved_files is not None and not self.run_started.is_set():
                self._start()

    def before_run(self) -> None:
        """A run begins: compiles under way trace nothing more (the run's own replay does)."""
        import time

        self.run_began_ns = time.time_ns()
        self.run_started.set()
        self.again = False

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def stuck(self) -> bool:
        """Compiles running for longer than any kernel's take: the learner's code loops."""
        import time

        return self.running() and time.monotonic() - self.started_at > LONGEST_SECONDS


def compile_saved(calls, policy, run_started: threading.Event | None = None) -> int:
    """Trace, lower and compile each call's program for its module as the file is now; returns how
    many compiled or were found kept. This thread traces and lowers (Python); another compiles
    (XLA, which lets go of the GIL), so one program compiles while the next is traced. Once
    `run_started` is set, nothing more is traced: the run replays the rest itself (grading/ahead.py),
    and what is lowered already is compiled. Errors end one call's guess, never the caller."""
    import queue

    from jax.experimental.pallas import tpu as pltpu

    from ..core import jax_internals
    from ..grading import ahead, backend, compiled, unit_files

    mine = None
    if policy is not None and jax_internals.host_callback_programs() is None:  # a run sets its own
        mine = policy
        jax_internals.compile_host_callback_programs(policy)
    lowered: queue.Queue = queue.Queue()
    done = []

    def compile_lowered():
        while (item := lowered.get()) is not None:
            program, lowering, call_args, elsewhere = item
            executable = None
            try:
                executable = program.compile_lowered(lowering, call_args, {})
                done.append(program)
            except Exception as error:
                logger.debug("compile on save left out: %s", error)
            finally:
                elsewhere.compiled(executable)  # a run waiting for it goes on, with it or without

    compiler = threading.Thread(target=compile_lowered, name="tpucourse-compiles-on-save-xla", daemon=True)
    compiler.start()
    packages: list = []
    modules_before = set(sys.modules)
    try:
        with pltpu.force_tpu_interpret_mode(backend.tpu_interpret_params()):
            modules: dict = {}
            origins: dict = {}  # path -> (path, the digest of the source imported), or None
            programs = compiled.CompiledPrograms()
            compiled.forget_compiled_elsewhere()  # an earlier save's: this file is newer
            for call in calls:
                if run_started is not None and run_started.is_set():
                    break
                path, tree_root, chapter, name = call.source
                with ahead.as_called(call) as same, unit_files.recording_apart(tree_root):
                    if not same:  # traced under settings this thread cannot take
                        continue
                    try:
                        if path not in modules:
                            modules[path], origins[path] = _import_with_origin(path, tree_root, chapter, name,
                                                                               packages)
                        function = getattr(modules[path], call.name)
                        program = programs.get(function, dict(call.static), call.kind)
                        call_args = call.arguments()
                        stage = program.trace(call_args, {})
                        identity = compiled.program_identity(stage, call_args, {}, origins[path])
                        lowering = program.lower_trace(stage, call_args, {})
                        lowered.put((program, lowering, call_args, compiled.compiling_elsewhere(identity)))
                    except Exception as error:  # the run meets it itself
                        logger.debug("compile on save of %s.%s left out: %s", name, call.name, error)
    finally:
        lowered.put(None)
        compiler.join()
        trees = tuple(os.path.join(os.path.abspath(call.source[1]), "") for call in calls)
        run_began = run_started is not None and run_started.is_set()
        for name in set(sys.modules) - modules_before:
            # Gone with the guess: the package of its own, and the graded tree's modules the learner's
            # imported by another name, which the next run imports anew (not those a run that began
            # meanwhile may be importing).
            if any(name == p or name.startswith(p + ".") for p in packages) or (
                    not run_began and _file_under(sys.modules.get(name), trees)):
                sys.modules.pop(name, None)
        if mine is not None and jax_internals.host_callback_programs() is mine:
            jax_internals.compile_host_callback_programs(None)
    return len(done)


def _file_under(module, folders: tuple) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and os.path.abspath(file).startswith(folders)


def _import_with_origin(path: str, tree_root: str, chapter: str, name: str, packages: list):
    """The module imported apart, and where its programs come from (calls.program_origin): its
    file and the digest of its source, or None where the file changed while it was imported."""
    import hashlib

    before = _read(path)
    module = _import_apart(tree_root, chapter, name, packages)
    same = before is not None and before == _read(path)
    return module, (path, hashlib.sha256(before).hexdigest()) if same else None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def _import_apart(tree_root: str, chapter: str, name: str, packages: list):
    """The graded module imported under a package of its own (its chapter's relative imports too)."""
    from pathlib import Path

    from ..grading.tree import GradedTree, _chapter_package

    tree = GradedTree(PACKAGE_KIND, Path(tree_root))
    package = _chapter_package(tree, chapter)
    root_package = package.rsplit(".", 1)[0]
    if root_package not in packages:
        packages.append(root_package)
    return importlib.import_module(f"{package}.{name}")
