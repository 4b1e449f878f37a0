"""Compiled calls: the program cache shared by graded code and the checker's oracles, and the
one key every per-call cache of a run uses.

Graded code is first run as one jitted program: op by op, JAX compiles every
primitive of every distinct shape and dtype on its own, and a chapter of pure-JAX
exercises spent most of its first run doing that (docs/speed.md has the times
before and after). Code that cannot be traced (Python control flow
on values, NumPy calls on arrays) or that fails in any way is run again eagerly,
so the learner sees the error of their code as written, never a tracer's.

A program that runs a kernel under interpret mode on a CPU is compiled with
`kernel_program_options()`, its own compiler options: such a program is mostly host
callbacks and loops, XLA compiles it two to three times faster without its
optimisations, and it runs as fast (docs/speed.md). The checker's own programs on a CPU
(oracles and floors: `checker=True`) compile with them too: each runs once or twice per
shape on small inputs, and compiling them was most of a cold run's time outside the
kernels. A graded pure-JAX program compiles with XLA's defaults, so its optimised HLO,
which some exercises read, stays what it was.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

from ..core import jax_internals, kept_files
from . import backend
from ..readers.call_keys import call_key, is_array

# XLA's CPU compiler options for kernel programs under interpret mode. Each shortens the
# compile of the course's kernels without slowing their runs (bench/compile_options.py).
# Wanted, not assumed: XLA drops options between versions (jaxlib 0.12's XLA no longer knows
# `xla_cpu_use_fusion_emitters`, and refuses to compile with it), so a run uses the ones the
# installed XLA accepts (kernel_program_options).
KERNEL_PROGRAM_OPTIONS = {
    "xla_backend_optimization_level": 0,  # LLVM's optimisation level
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,  # the older elemental emitters (jaxlib 0.10-0.11 only)
}
KERNEL_PROGRAM_CACHE = "kernel-programs"  # the folder of --jax-cache that keeps them

logger = logging.getLogger(__name__)
_probe_lock = threading.Lock()


@functools.cache
def _accepted(options: tuple) -> dict:
    with _probe_lock:
        return _probe(dict(options))


def kernel_program_options() -> dict:
    """KERNEL_PROGRAM_OPTIONS less those the installed XLA rejects, probed once per process.

    One compile of a one-op program with all of them (a few ms); only if XLA rejects that,
    one per option, and each rejected one is left out with a debug line. Starts JAX's
    backend if nothing has: call it where a program is about to be compiled.
    """
    return _accepted(tuple(KERNEL_PROGRAM_OPTIONS.items()))


def _probe(options: dict) -> dict:
    if _compiles_with(options) is None:
        return options
    accepted = {}
    for name, value in options.items():
        error = _compiles_with({name: value})
        if error is None:
            accepted[name] = value
        else:
            logger.debug("XLA compile option %s=%r left out: %s", name, value, error)
    return accepted


def _compiles_with(options: dict) -> str | None:
    """None if a one-op CPU program compiles with these XLA options, else XLA's first line."""
    import jax
    import numpy as np

    try:
        one = jax.device_put(np.float32(1), jax.devices("cpu")[0])
        jax.jit(lambda x: x + 1).lower(one).compile(compiler_options=options)
    except Exception as error:  # "No such compile option", or a value of the wrong type
        return (str(error).strip().splitlines() or [type(error).__name__])[0]
    return None


def compile_kernel_programs(directory: Path | None, on_first_compile=None) -> None:
    """From now on, every program with host callbacks this process compiles on a CPU compiles
    with kernel_program_options() and is kept in `directory` across runs (None: not kept).

    These are the kernels under interpret mode, and the per-core programs the interpreter
    compiles while it runs a kernel on several simulated cores (the race check), each
    inside the call. JAX never caches them; how they are cached safely is
    jax_internals.compile_host_callback_programs's to say. It lasts the session:
    `stop_compiling_kernel_programs` restores JAX's own way at its end. `on_first_compile` is
    called once, when the first program not kept is compiled (the run's kernels changed).
    """
    jax_internals.compile_host_callback_programs(
        jax_internals.HostCallbackPrograms(directory, tuple(kernel_program_options().items()),
                                           on_first_compile=on_first_compile))


def stop_compiling_kernel_programs() -> None:
    """JAX's own way again; the folder the programs were kept in is held to its size (kept_files)."""
    policy = jax_internals.compile_host_callback_programs(None)
    if policy is not None and policy.directory is not None:
        kept_files.trim(policy.directory)


# Programs compiled from another import of the same code: a graded file saved between two runs is
# compiled while the learner's next `pytest` starts (learner/compiles_on_save.py), from a module
# imported apart. The run imports the module anew, and JAX, which keys a program by its function
# object, would lower it again. So each is kept here under what it is (program_identity): the
# module's file and the digest of its source, the traced program's whole structure
# (readers/program_structure.py), the call's signature. A run's own trace of its own import that
# is found to be the same program runs the executable (Program.adopt): the learner's Python still
# runs and every check of the trace is still made; JAX's lowering and XLA's compile are skipped.
KEPT_ELSEWHERE = 32
_compiled_elsewhere: dict = {}
_compiled_elsewhere_lock = threading.Lock()


def program_identity(stage, args, traced, origin) -> tuple | None:
    """What a traced program is, wherever it was traced (a jax.stages.Traced): None where it
    cannot be said in full. origin: (the module's resolved file, the digest of its source as
    imported), which the program's source locations come from."""
    from ..readers.program_structure import structure_key

    if origin is None or None in origin:
        return None
    signature = _signature(args, traced)
    if signature is None:
        return None
    try:
        import jax

        outputs = str(jax.tree.structure(stage.out_info))
    except Exception:
        return None
    structure = structure_key(stage.jaxpr)
    return None if structure is None else (tuple(origin), structure, signature, outputs)


class CompiledElsewhere:
    """One program being compiled outside any run: its executable once compiled (None: it failed)."""

    def __init__(self):
        self._done = threading.Event()
        self.executable = None

    def compiled(self, executable) -> None:
        self.executable = executable
        self._done.set()

    def wait(self, seconds: float):
        """The executable, once compiled within `seconds` (a lowering is never waited for twice)."""
        return self.executable if self._done.wait(seconds) else None


ELSEWHERE_WAIT_SECONDS = 30.0  # a compile under way elsewhere: waited for, not made twice


def compiling_elsewhere(identity) -> CompiledElsewhere:
    """A program lowered outside any run and now compiling, for the next run's same program to
    adopt (it waits for the compile under way); call .compiled(executable) once it is done."""
    entry = CompiledElsewhere()
    if identity is not None:
        with _compiled_elsewhere_lock:
            _compiled_elsewhere[identity] = entry
            while len(_compiled_elsewhere) > KEPT_ELSEWHERE:
                _compiled_elsewhere.pop(next(iter(_compiled_elsewhere)))
    return entry


def forget_compiled_elsewhere() -> None:
    with _compiled_elsewhere_lock:
        _compiled_elsewhere.clear()


class CompiledPrograms:
    """One jitted program per (function, compile-time keyword arguments, call or VJP)."""

    def __init__(self):
        self._programs: dict = {}
        self._lock = threading.Lock()  # a run's calls and its replays (ahead.py) share one program

    def get(self, function, kwargs, kind: str = "call", *, checker: bool = False):
        """function(*args, **kwargs) ("call") or its VJP ("vjp") as one jitted program.

        "call" returns a callable of the positional args; "vjp" one of (args, cotangents)
        giving (outputs, grads). Keyword arguments that are arrays (masks) are traced;
        the others (block sizes, flags, scales) are compile-time, and the program is kept
        per (function, those values), so every call that binds the same ones shares one
        jit cache. Shared by the graded calls and by the checker's oracles and floors
        (checker=True: compiled with kernel_program_options() on a CPU).
        """
        static = {k: v for k, v in kwargs.items() if not is_array(v)}
        dynamic = {k: v for k, v in kwargs.items() if is_array(v)}
        key = call_key(function, (), static)
        with self._lock:
            return self._get(function, static, dynamic, key, kind, checker)

    def _get(self, function, static, dynamic, key, kind, checker):
        import jax

        program = None if key is None else self._programs.get((key, kind, checker))
        if program is None:
            if kind == "call":
                jitted = jax.jit(lambda *args, **traced: function(*args, **static, **traced))
            else:
                def vjp(args, cotangents, **traced):
                    outputs, pullback = jax.vjp(lambda *a: function(*a, **static, **traced), *args)
                    return outputs, pullback(cotangents)
                jitted = jax.jit(vjp)
            program = Program(jitted, cheap_on_cpu=checker)
            if key is not None:  # a setting that cannot be keyed: compiled for this call alone
                self._programs[(key, kind, checker)] = program
        return functools.partial(program, **dynamic) if dynamic else program


class Program:
    """A jitted function, compiled once per call signature, with the options its content calls for.

    Called like the jitted function. The first call with a signature (the arrays' shapes,
    dtypes and placements, and the JAX settings a trace depends on, the interpret mode among
    them) traces it, compiles it (with kernel_program_options() where it runs a kernel under
    interpret mode on a CPU, or on a CPU at all with cheap_on_cpu) and keeps the executable;
    later calls run that executable.
    """

    def __init__(self, jitted, *, cheap_on_cpu: bool = False):
        self.jitted = jitted
        self.cheap_on_cpu = cheap_on_cpu
        self._executables: dict = {}

    def __call__(self, *args, **traced):
        return self.compiled(*args, **traced)(*args, **traced)

    def compiled(self, *args, **traced):
        """The executable for these arguments, compiled on first use (a jax.stages.Compiled)."""
        executable = self.cached(args, traced)
        if executable is None:
            executable = self.compile_trace(self.trace(args, traced), args, traced)
        return executable

    def cached(self, args, traced):
        """The executable already compiled for these arguments, or None."""
        key = _signature(args, traced)
        return None if key is None else self._executables.get(key)

    def trace(self, args, traced):
        """The traced program (a jax.stages.Traced): the learner's Python runs here."""
        return self.jitted.trace(*args, **traced)

    def compile_trace(self, stage, args, traced, origin=None):
        """Lower and compile a trace of this program (XLA's work, no learner code), and keep it;
        or, for a trace of a graded module's function (origin: adopt), the same program compiled
        from another import of its source."""
        adopted = self.adopt(stage, args, traced, origin)
        if adopted is not None:
            return adopted
        return self.compile_lowered(self.lower_trace(stage, args, traced), args, traced)

    def adopt(self, stage, args, traced, origin):
        """The executable of the same program compiled from another import of the module (see
        program_identity), kept as this program's own; None where there is none."""
        if origin is None or not _compiled_elsewhere:
            return None
        identity = program_identity(stage, args, traced, origin)
        with _compiled_elsewhere_lock:
            entry = _compiled_elsewhere.get(identity) if identity is not None else None
        executable = entry.wait(ELSEWHERE_WAIT_SECONDS) if entry is not None else None
        if executable is not None:
            _, _, signature, _ = identity
            self._executables[signature] = executable
        return executable

    def lower_trace(self, stage, args, traced):
        """A trace of this program lowered, with the compiler options its content calls for:
        (jax.stages.Lowered, options). JAX's work, in Python."""
        cheap = ((self.cheap_on_cpu and _platforms(args, traced) == {"cpu"})
                 or runs_interpreted_kernel(stage.jaxpr, args, traced))
        return stage.lower(), kernel_program_options() if cheap else None

    def compile_lowered(self, lowering, args, traced):
        """What lower_trace gave compiled (XLA's work, outside Python), and kept."""
        lowered, options = lowering
        executable = lowered.compile(compiler_options=options)
        key = _signature(args, traced)
        if key is not None:
            self._executables[key] = executable
        return executable

    def lower(self, *args, **traced):
        """The jitted function's lowering, compiled with XLA's defaults (for reading its HLO)."""
        return self.jitted.lower(*args, **traced)


def runs_interpreted_kernel(closed_jaxpr, args=(), traced=None) -> bool:
    """Whether a traced program runs a pallas_call under interpret mode on a CPU device."""
    from ..readers.traced_program import count_pallas_calls

    if jax_internals.interpret_mode_in_effect() is None:
        return False
    return _platforms(args, traced) == {"cpu"} and count_pallas_calls(closed_jaxpr) > 0


def _platforms(args, traced=None) -> set:
    """The platforms of the devices the arguments are on (JAX's default backend's if none)."""
    import jax

    devices = {d for leaf in jax.tree.leaves((args, traced or {})) if isinstance(leaf, jax.Array)
               for d in leaf.sharding.device_set}
    return {d.platform for d in devices} or {jax.default_backend()}


def _signature(args, traced):
    """What jit keys a compiled program on, for these arguments: None if they cannot be keyed."""
    import jax

    try:
        leaves, tree = jax.tree.flatten((args, traced))
        key = (tree, tuple((leaf.shape, leaf.dtype, leaf.weak_type, leaf.sharding) for leaf in leaves),
               jax_internals.jit_cache_context())
        hash(key)
    except Exception:
        return None
    return key


def compiled_or_eager(compiled, eager, args):
    """compiled() where every argument is a jax.Array, else (and after any failure) eager().

    Other arguments keep their eager meaning: traced, a Python 4096 ** 3 would
    overflow int32, and NumPy arrays would stop computing in NumPy's dtypes.
    """
    import jax

    if not all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(args)):
        return eager()
    try:
        return compiled()
    except Exception:
        backend.reset_after_failure()  # a kernel that failed must not poison the rerun
        return eager()
