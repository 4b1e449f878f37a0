"""A run's kernel programs traced and compiled on threads of their own, before its tests call them.

In a learner's edit loop a warm process (learner/served_runs.py) answers the same `pytest
exercises/chNN/test_x.py` run after run, and between two of them a kernel changed: every program
of it is new. Each test traces, lowers and compiles its programs where it first calls them, one
after the other, while the machine's second core idles. The graded calls a run compiled are the
best guess at what the next run of the same arguments will: they are kept (`remember`, per run,
in call order), and the next run replays them (`Ahead`) as soon as its tests resolve the graded
function (`resolved`): the learner's code as it is now, traced with the same argument shapes,
checked as the call checks it and lowered on one thread, compiled on others (XLA lets go of the
GIL), into the run's own CompiledPrograms. A call that comes first finds its program compiled, or
waits for the one under way (`await_program`): the learner's Python within the call's deadline,
XLA's compile outside it; a replay not begun yet the call makes itself.

What stays as it was: each program is a trace of the learner's code as the run imported it, keyed
as jit keys it, so a replay never stands in for another program; a replay that fails, is refused
(VMEM, the chip's products) or guessed wrong leaves nothing, and the call traces for itself and
meets the failure there. The files the replay's trace opens count in the unit of the call that
uses its program (unit_files.recording_apart). What moves: Python a trace runs (a `print` of the
learner's) runs on the replay's thread, while whichever test is current captures it. Only a warm
process's runs on a CPU replay (run/session.py sets GradingContext.ahead); a fresh process has
nothing remembered. Between runs, learner/compiles_on_save.py compiles the same calls once a
graded file is saved.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import threading

from ..core import jax_internals
from . import unit_files

logger = logging.getLogger(__name__)

KEPT_RUNS = 8  # the runs (argument lists) whose calls a process remembers
# XLA's compiles of a run's replays at once: one per core the process may use, at most two. A
# kernel program takes XLA 0.14-0.27 s of CPU to compile on JAX 0.12 and JAX 0.04-0.06 s to lower
# (docs/speed.md, 2026-12-07): with one compiling thread the run's thread waited for it, and its
# core idled.
COMPILING_THREADS = max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                else (os.cpu_count() or 1)))
JOIN_SECONDS = 10.0  # at a run's end, how long the replay under way may take to finish
PLAIN = (bool, int, float, str, type(None))

# run key -> the replayable calls that run made, in the order it first made them
_remembered: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
_left_running: list = []  # replay threads a run's end could not wait for: learner code that does not return
_last_run: tuple | None = None  # (the last run's calls, how it compiled kernel programs): learner/compiles_on_save.py


def last_run() -> tuple[list, object] | None:
    """The calls the process's last run made, and the policy its kernel programs compiled under
    (jax_internals.HostCallbackPrograms, none called back on a first compile); None before a run."""
    return _last_run


def still_running() -> bool:
    """Whether a replay outlived its run (learner code that hangs in its trace): the process must end."""
    return any(thread.is_alive() for thread in _left_running)


class Call:
    """One graded call as a later run can make it again: which function of which module of the
    graded tree (`source`: the module's file, the tree's root, the chapter and the module's name),
    its compile-time keyword arguments, call or VJP, and its arguments' shapes."""

    def __init__(self, source: tuple, name: str, static: tuple, kind: str, tree, leaves: tuple, context,
                 interpret=None):
        self.source, self.name, self.static, self.kind = source, name, static, kind
        self.tree, self.leaves, self.context = tree, leaves, context
        self.interpret = interpret  # the TPU interpret mode it ran under (the race check's own, say)

    @property
    def module(self) -> str:
        """The graded module's file."""
        return self.source[0]

    @property
    def key(self):
        return (self.module, self.name, self.static, self.kind, self.tree, self.leaves, self.context)

    def arguments(self):
        """The call's arguments as shapes (jax.ShapeDtypeStruct), placed as the recorded ones were."""
        import jax

        return jax.tree.unflatten(self.tree, [jax.ShapeDtypeStruct(shape, dtype, sharding=sharding,
                                                                   weak_type=weak)
                                              for shape, dtype, weak, sharding in self.leaves])


def describe(graded, kwargs: dict, kind: str, call_args) -> Call | None:
    """The call of `graded` (a GradedFunction) as a Call, or None where it cannot be made again from
    shapes: a function not of the graded tree's modules, keyword arguments other than plain values,
    arguments not all arrays."""
    import jax

    source, name = getattr(graded, "replay_source", None), getattr(graded, "name", None)
    if source is None or not isinstance(name, str):
        return None
    if not all(_plain(value) for value in kwargs.values()):
        return None
    leaves, tree = jax.tree.flatten(call_args)
    if not leaves or not all(isinstance(leaf, jax.Array) for leaf in leaves):
        return None
    try:
        described = tuple((tuple(leaf.shape), leaf.dtype, bool(leaf.weak_type), leaf.sharding) for leaf in leaves)
        call = Call(source, name, tuple(sorted(kwargs.items())), kind, tree, described,
                    jax_internals.jit_cache_context(), jax_internals.interpret_mode_in_effect())
        hash(call.key)
    except Exception:
        return None
    return call


@contextlib.contextmanager
def as_called(call: Call):
    """This thread in the interpret mode `call` ran under (a test's own, as the race check's two
    simulated cores): yields whether the thread's JAX settings are then the call's, which its
    program's trace, lowering and cache key depend on. Where they are not, nothing of it is made
    here: the call makes it itself."""
    from jax.experimental.pallas import tpu as pltpu

    taken = call.interpret is None or call.interpret == jax_internals.interpret_mode_in_effect()
    with contextlib.nullcontext() if taken else pltpu.force_tpu_interpret_mode(call.interpret):
        yield jax_internals.jit_cache_context() == call.context


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(item) for item in value)
    return isinstance(value, PLAIN)


class Ahead:
    """One run's replays: the calls the last run of the same key made, queued as the run's tests
    resolve their functions, run one after the other on one thread."""

    def __init__(self, key, context):
        self.key, self.context = key, context
        with _lock:
            self.plan = list(_remembered.get(key, ()))
        self.made: dict = {}  # Call.key -> Call, this run's calls in order (remembered at its end)
        self.jobs: dict = {}  # (id(program), signature) -> Job
        self.queued: set = set()  # Call.key already queued this run
        self.queue: collections.deque = collections.deque()
        self.wake = threading.Condition()
        self.ended = False
        self.thread: threading.Thread | None = None
        self.current: Job | None = None  # the replay under way
        self.lowered: collections.deque = collections.deque()  # jobs traced, for the compiling threads
        self.compilers: list[threading.Thread] = []

    # ---------------------------------------------------------------- the run's thread

    def remember(self, graded, kwargs: dict, kind: str, call_args) -> None:
        """A call the run made through a compiled program: the next run of this key replays it."""
        call = describe(graded, kwargs, kind, call_args)
        if call is not None and call.key not in self.made:
            self.made[call.key] = call

    def resolved(self, graded, function) -> None:
        """The run resolved `graded` (a LearnerFunction) to `function`: its remembered calls are queued."""
        source = getattr(graded, "replay_source", None)
        if source is None or not self.plan:
            return
        module = source[0]
        wanted = [call for call in self.plan
                  if call.module == module and call.name == graded.name and call.key not in self.queued]
        if not wanted:
            return
        from .compiled import _signature

        with self.wake:
            if self.ended:
                return
            for call in wanted:
                self.queued.add(call.key)
                program = self.context.programs.get(function, dict(call.static), call.kind)
                call_args = call.arguments()
                with as_called(call) as same:  # the signature the call keys its program by
                    signature = _signature(call_args, {}) if same else None
                    if signature is None or program.cached(call_args, {}) is not None:
                        continue
                job = Job(call, graded, function, program, call_args, signature)
                self.jobs[(id(program), signature)] = job
                self.queue.append(job)
            if not self.queue:
                return
            self.wake.notify()
            if self.thread is None:
                self.thread = threading.Thread(target=self._work, name="tpucourse-programs-ahead", daemon=True)
                self.compilers = [threading.Thread(target=self._compile, name="tpucourse-programs-ahead-compiles",
                                                   daemon=True) for _ in range(COMPILING_THREADS)]
                self.thread.start()
                for compiler in self.compilers:
                    compiler.start()

    def await_program(self, program, call_args, bound, deadline, key) -> list:
        """Wait for the replay of this program, if one is queued or under way: its trace (the
        learner's Python) within the call's deadline, its compile after. Returns the files of the
        graded tree the replay's trace opened (to be counted in the calling unit)."""
        from .compiled import _signature

        if bound:
            return []
        job = self.jobs.get((id(program), _signature(call_args, bound)))
        if job is None:
            return []
        with self.wake:
            if not job.started:  # not begun: the call compiles it itself, now
                job.started = True
                del self.jobs[(id(program), job.signature)]
                job.traced.set()
                job.done.set()
                return []
        deadline.call(job.wait_traced, key=key)
        job.done.wait()
        return job.files

    def end(self) -> None:
        """The run is over: queued replays are dropped, the one under way may finish (a compile
        cannot be stopped), and the run's calls are remembered for the next run of its key."""
        with self.wake:
            self.ended = True
            self.queue.clear()
            self.lowered.extend([None] * len(self.compilers))  # each compiling thread's last
            self.wake.notify_all()
        if self.thread is not None:
            current = self.current
            # A compile under way ends by itself; learner code being traced may never return.
            self.thread.join(JOIN_SECONDS if current is None or current.traced.is_set() else 0.5)
            if self.thread.is_alive():
                _left_running.append(self.thread)
            else:
                for compiler in self.compilers:
                    compiler.join(JOIN_SECONDS)
        global _last_run
        policy = jax_internals.host_callback_programs()
        if policy is not None:
            policy = dataclasses.replace(policy, on_first_compile=None)
        with _lock:
            _last_run = (list(self.made.values()), policy)
            _remembered[self.key] = list(self.made.values())
            _remembered.move_to_end(self.key)
            while len(_remembered) > KEPT_RUNS:
                _remembered.popitem(last=False)

    # ---------------------------------------------------------------- the replay's thread

    def _work(self) -> None:
        """The tracing thread: each job traced, checked and lowered (Python, the GIL held), then
        handed to the compiling thread, so one program compiles while the next is traced."""
        while True:
            with self.wake:
                while not self.queue and not self.ended:
                    self.wake.wait()
                if self.ended:
                    return
                job = self.queue.popleft()
                if job.started:  # the call took it over
                    continue
                job.started = True
                self.current = job
            try:
                with as_called(job.call) as same:
                    if same:
                        job.lower()
            except Exception as error:  # a guess only: the call itself meets whatever this met
                logger.debug("replay of %s.%s left out: %s", job.call.module, job.call.name, error)
            finally:
                job.traced.set()
            with self.wake:
                if self.ended:  # the run is over (a trace that outlasted it): nothing more is compiled
                    job.done.set()
                    return
                self.lowered.append(job)
                self.wake.notify_all()

    def _compile(self) -> None:
        """A compiling thread: XLA's compiles, which let go of the GIL."""
        while True:
            with self.wake:
                while not self.lowered:
                    self.wake.wait()
                job = self.lowered.popleft()
            if job is None:
                return
            try:
                with as_called(job.call):  # the executable is kept under the call's settings
                    job.compile()
            except Exception as error:
                logger.debug("replay of %s.%s left out: %s", job.call.module, job.call.name, error)
            finally:
                job.done.set()
                self.current = None if self.current is job else self.current


class Job:
    """One replay: the program of a remembered call, for the function the run resolved."""

    def __init__(self, call: Call, graded, function, program, call_args, signature):
        self.call, self.graded, self.function, self.program = call, graded, function, program
        self.call_args, self.signature = call_args, signature
        self.started = False
        self.traced, self.done = threading.Event(), threading.Event()
        self.files: list = []
        self.lowering = None  # (jax.stages.Lowered, compiler options), once lower() succeeded

    def wait_traced(self) -> None:
        """Until the trace ended, in short waits: the deadline stops a call by raising in its thread,
        which a wait that never returns to Python would not let it do."""
        while not self.traced.wait(0.05):
            pass

    def lower(self) -> None:
        """Trace (the learner's Python), check as the call would, lower (or adopt the same program
        compiled on save, compiled.Program.adopt)."""
        from .context import graded_precision

        call, program, call_args = self.call, self.program, self.call_args
        check_args = call_args if call.kind == "call" else call_args[0]
        with graded_precision(check_args):
            with unit_files.recording_apart(self.graded.module.tree_root) as seen:
                try:
                    traced = program.trace(call_args, {})
                    self.graded._check_program(self.function, check_args, dict(call.static), traced.jaxpr)
                finally:
                    self.files = sorted(seen.files)
                    self.traced.set()
            if program.adopt(traced, call_args, {}, self.graded.program_origin()) is None:
                self.lowering = program.lower_trace(traced, call_args, {})

    def compile(self) -> None:
        """Compile what lower() gave into the run's program (XLA's work, outside Python)."""
        if self.lowering is not None:
            self.program.compile_lowered(self.lowering, self.call_args, {})
