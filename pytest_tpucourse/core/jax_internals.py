"""Every private JAX API this package touches, in one module. Read against READ_AGAINST.

Upgrading JAX means reading this file: each function below names what it reaches
into (`jax._src`, the TPU interpreter's module state, the tpu_info registry, the
parameters of a `pallas_call` equation, a private entry point of a shipped kernel)
and what the rest of the package relies on it for. Everything else uses public JAX.
JAX is imported inside the functions: importing this module loads nothing heavy.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kept_files

# The JAX releases each function below was read against (pyproject.toml's support matrix):
# 0.10.2 (Python 3.11), 0.11.2 and 0.12.0.1 (Python 3.12 and 3.13). Every name used here exists
# in all three with the same meaning; a difference met here gets one branch on the installed
# version, in the function it concerns. Differences read so far, none of them in this module:
# - XLA's CPU option `xla_cpu_use_fusion_emitters` is gone in jaxlib 0.12 (grading/compiled.py
#   probes the options instead of branching on a version);
# - `pl.DeviceIdType` and `device_id_type=` are deprecated in 0.12; the mesh, which the
#   course uses, is the default in all three, so the course passes neither;
# - `compilation_cache.get_cache_key`'s optional fifth argument was renamed (ignore_callbacks
#   in 0.10.2, ignore_custom_partitioning after); it is called with the four positional ones.
# - the race detector prints each race in 0.10.2 and raises on the first in 0.12 (its new
#   `InterpretParams.on_race`, "raise" by default): `race_detection_options` and
#   `race_reports_into` give every version 0.10.2's behaviour (one branch, on the field).
READ_AGAINST = ("0.10.2", "0.11.2", "0.12.0.1")


# The TPU interpreter reports a failing host callback through this logger, with a
# full traceback, before the error reaches the caller.
CALLBACK_LOGGER = "jax._src.callback"


# ---------------------------------------------------------------- interpret mode

def clear_global_interpret_mode() -> None:
    """Undo `pltpu.set_tpu_interpret_mode` (JAX has no public way back to "not set")."""
    set_global_interpret_mode(None)


def global_interpret_mode():
    """The Pallas TPU interpret mode set for the whole process (None, True or InterpretParams)."""
    from jax._src import config as jax_config

    return jax_config.pallas_tpu_interpret_mode_context_manager.get_global()


def set_global_interpret_mode(mode) -> None:
    """Set the process's Pallas TPU interpret mode to a value global_interpret_mode() gave, None too."""
    from jax._src import config as jax_config

    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(mode)


def read_interpret_mode_when_called() -> None:
    """Make every `pl.pallas_call(...)` read the Pallas TPU interpret mode when it is called.

    JAX's `pallas_call` reads the mode once, when `pl.pallas_call(kernel, ...)` builds the
    function (in the private `jax._src.pallas.pallas_call._pallas_call`), and the function
    keeps it. A kernel a learner builds at module import (`kernel = pl.pallas_call(...)`)
    would then keep whatever mode held at import: none, on a CPU ("Only interpret mode is
    supported on CPU backend"), or the session's, even inside the race check's
    `force_tpu_interpret_mode(detect_races=True)` or with interpret mode switched off for
    the TPU lowering. Wrapped here, the function builds JAX's own pallas_call for the mode
    in effect at each call (one per mode, kept), so a kernel built at import is graded
    exactly like one built inside the function. Idempotent; `restore_interpret_mode_reading`
    undoes it for kernels built afterwards.
    """
    from jax._src import config as jax_config
    from jax._src.pallas import pallas_call as module

    original = module._pallas_call
    if getattr(original, "tpucourse_reads_mode_when_called", False):
        return

    @functools.wraps(original)
    def build(kernel, out_shape, **params):
        per_mode: dict = {}

        def call(*args):
            mode = jax_config.pallas_tpu_interpret_mode_context_manager.value
            try:
                built = per_mode.get(mode)
            except TypeError:  # a mode that cannot be a key: built for this call alone
                return original(kernel, out_shape, **params)(*args)
            if built is None:
                built = per_mode[mode] = original(kernel, out_shape, **params)
            return built(*args)

        return call

    build.tpucourse_reads_mode_when_called = True
    build.tpucourse_original = original
    module._pallas_call = build
    # The wrapper is one more frame between the learner's call and JAX's: without this, every
    # pallas_call's source location (in a jaxpr, in the HLO's metadata) would be this file.
    from jax._src import source_info_util

    if __file__ not in source_info_util._exclude_paths:
        source_info_util.register_exclusion(__file__)


def restore_interpret_mode_reading() -> None:
    """Undo read_interpret_mode_when_called for pallas_calls built from now on."""
    from jax._src.pallas import pallas_call as module

    module._pallas_call = getattr(module._pallas_call, "tpucourse_original", module._pallas_call)


def interpreter_callbacks_take_host_arrays() -> None:
    """Hand the TPU interpreter's own host callbacks their arguments as the NumPy arrays XLA
    gives, without JAX's `device_put` of each one first.

    Every Ref access, DMA and semaphore of a kernel under TPU interpret mode is an
    `io_callback` into the interpreter (`jax._src.pallas.mosaic.interpret`), and JAX's
    `io_callback_impl` (private, `jax._src.callback`) puts each argument on the CPU device
    before calling the function: a `device_put` per call, for a token, a few int32 ids and
    the indexers, which the interpreter then turns back into Python ints and NumPy arrays
    (`int(...)`, `np.array(val)`: it copies every value it keeps), slower from a jax Array
    than from NumPy. The callbacks were a third of a chapter 13 run and are a tenth without
    it (docs/speed.md). The interpreter's
    functions get the same values as NumPy arrays; every other io_callback (a learner's, the
    interpreter's per-core thread map, a grid-point recorder) still goes through JAX's own
    path. The failure path is JAX's: the error is logged to CALLBACK_LOGGER and raised.
    Idempotent.
    """
    import logging

    import numpy as np
    from jax._src import callback as module
    from jax._src import config as jax_config
    from jax._src import tree_util
    from jax._src import xla_bridge

    original = module.io_callback_impl
    if getattr(original, "tpucourse_host_arrays", False):
        return
    logger = logging.getLogger(CALLBACK_LOGGER)
    # id of a callback's function -> whether it takes host arrays. The interpreter's functions live
    # as long as their module, so an id kept here as True is never another function's.
    verdicts: dict = {}

    def takes_host_arrays(flat_callback) -> bool:
        function = getattr(flat_callback, "callback_func", None)
        while isinstance(function, functools.partial):
            function = function.func
        verdict = verdicts.get(id(function))
        if verdict is None:
            where = getattr(function, "__module__", "") or ""
            verdict = verdicts[id(function)] = (where.startswith(_INTERPRETER_MODULE)
                                                and getattr(function, "__name__", "") not in _JAX_ARRAY_CALLBACKS)
        return verdict

    @functools.wraps(original)
    def io_callback_impl(*args, callback, **params):  # params: result_avals, sharding, ordered
        if not takes_host_arrays(callback):
            return original(*args, callback=callback, **params)
        cpu_device = xla_bridge.local_devices(backend="cpu")[0]
        with jax_config.default_device(cpu_device):
            try:
                return tree_util.tree_map(np.asarray, callback(*args))
            except BaseException:
                logger.exception("jax.io_callback failed")
                raise

    io_callback_impl.tpucourse_host_arrays = True
    module.io_callback_impl = io_callback_impl


_INTERPRETER_MODULE = "jax._src.pallas.mosaic.interpret."
# The interpreter's callbacks that run JAX on their arguments (the per-core thread map
# compiles and runs the kernel body): these keep JAX's path.
_JAX_ARRAY_CALLBACKS = frozenset({"_thread_map_callback"})


# The Mosaic GPU interpreter, which JAX's lowering of an interpret-mode pallas_call imports every
# time (jax._src.pallas.pallas_call, inside a try/except ImportError) to ask whether the interpret
# parameters are GPU ones.
GPU_INTERPRETER = "jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call"


class _GpuInterpreterLeftOut(importlib.abc.MetaPathFinder):
    """Refuses the import of GPU_INTERPRETER at once (ModuleNotFoundError, an ImportError)."""

    def find_spec(self, name, path=None, target=None):
        if name == GPU_INTERPRETER:
            raise ModuleNotFoundError(f"{name} is left out of a course run: its kernels run under TPU "
                                      f"interpret mode", name=name)
        return None


_gpu_interpreter_left_out = _GpuInterpreterLeftOut()


def leave_out_gpu_interpreter(left_out: bool) -> None:
    """While left_out, the import of the Mosaic GPU interpreter (GPU_INTERPRETER) fails at once.

    JAX's lowering of a pallas_call under any interpret mode imports it to check for GPU
    interpret parameters, which a course run never has (its kernels run under TPU interpret mode).
    On JAX 0.10.2 without absl the import fails after importing part of Mosaic GPU, which is
    dropped again: 130 ms at a process's first kernel and a little each lowering after. On 0.12
    it succeeds, once: 0.2 s of a process's first kernel (docs/speed.md). A module imported
    already stays as it is. Idempotent; False puts the import back as JAX has it."""
    if left_out and _gpu_interpreter_left_out not in sys.meta_path:
        sys.meta_path.insert(0, _gpu_interpreter_left_out)
    elif not left_out and _gpu_interpreter_left_out in sys.meta_path:
        sys.meta_path.remove(_gpu_interpreter_left_out)


# How many times JAX 0.12's make_ir_context hands out one context in a thread after making it.
CONTEXT_REUSES = 10


def mlir_contexts_reused() -> bool:
    """Give JAX releases whose `make_ir_context` (private, `jax._src.interpreters.mlir`) builds a
    new MLIR context on every call the reuse JAX 0.12 has: each thread's context is handed out
    again CONTEXT_REUSES times before a new one is made (0.12 bounds it so the types, attributes
    and locations a context interns cannot grow without end).

    Every lowering, export and Mosaic serialisation asks for a context, and building one loads
    every dialect: 2.6 ms on JAX 0.10.2, against 0.2 ms for 0.12's reused one, about 45 times in
    one run of a chapter 11 test file (docs/speed.md). JAX's code that asks for contexts is the same
    in both releases, so reusing them is what 0.12 already runs. Returns whether this JAX needed
    it; JAX's own reuse (its `_thread_local_context`) is left as it is. Idempotent.

    A lowering started inside another on the same thread (an eager computation a lowering rule
    asks for under `jax.ensure_compile_time_eval`, a Mosaic kernel's module) is never handed the
    context the outer one is building in: 0.10.2's compile of the inner program fails in it
    ("symbol's parent must have the SymbolTable trait"). Each depth of nesting reuses a context
    of its own."""
    from jax._src.interpreters import mlir as module

    original = module.make_ir_context
    if hasattr(module, "_thread_local_context") or getattr(original, "tpucourse_reused", False):
        return False
    from jax._src.lib.mlir import ir

    held = threading.local()  # .levels: [context, times handed out again] per depth of nesting

    @functools.wraps(original)
    def make_ir_context():
        levels = held.__dict__.setdefault("levels", [])
        current = ir.Context.current  # the context of a lowering under way on this thread, if any
        depth = 0 if current is None else next(
            (level + 1 for level, (context, _) in enumerate(levels) if context is current), None)
        if depth is None:  # inside a context not handed out here: a new one, as JAX makes
            return original()
        if depth < len(levels) and levels[depth][1] < CONTEXT_REUSES:
            levels[depth][1] += 1
            return levels[depth][0]
        fresh = [original(), 0]
        levels[depth:depth + 1] = [fresh]
        return fresh[0]

    make_ir_context.tpucourse_reused = True
    module.make_ir_context = make_ir_context
    return True


_GRID_ORDER = "_get_randomized_grid_coordinates"  # in the interpreter's interpret_pallas_call module


def grid_orders_computed_ahead() -> bool:
    """Make the TPU interpreter's grid order a constant of the kernel's program, computed once.

    The interpreter (the private `_get_randomized_grid_coordinates` of
    `jax._src.pallas.mosaic.interpret.interpret_pallas_call`) visits each "parallel" grid axis in
    a random order drawn from `InterpretParams.random_seed`: a `jax.random.permutation` of the
    axis's extent, traced into every kernel program. Its inputs are all known when the program is
    traced (the extents of parallel axes must be), yet the threefry rounds and the sort of that
    permutation are most of what XLA compiles: the ch11 matmul's program on a 2 x 2 x 4 grid
    compiles in 0.07 s instead of 0.14 s on JAX 0.10.2, 0.13 s instead of 0.23 s on 0.12 without
    them (docs/speed.md). Here the same function runs once per (parallel extents, seed), eagerly,
    and the program holds its result: the same order, as constants (tests/test_grading_speed.py
    reads both facts off JAX). Returns whether it took effect (False where the interpreter has no
    such function, or it was done already). Idempotent."""
    import jax
    import numpy as np
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as module

    original = getattr(module, _GRID_ORDER, None)
    parallel_axes = getattr(module, "_get_parallel_dim_semantics", None)
    if original is None or parallel_axes is None or getattr(original, "tpucourse_ahead", False):
        return False
    # (extent of each parallel axis or None, seed, the settings JAX's random bits follow) -> the
    # coordinates, as NumPy arrays
    orders: dict = {}

    @functools.wraps(original)
    def grid_order(grid, mosaic_params, random_seed):
        try:
            parallel = parallel_axes(mosaic_params, len(grid))
            key = (tuple(int(size) if axis else None for size, axis in zip(grid, parallel)), random_seed,
                   jax.config.jax_default_prng_impl, jax.config.jax_threefry_partitionable)
            hash(key)
        except Exception:  # a parallel extent that is not concrete: JAX's own function says so
            return original(grid, mosaic_params, random_seed)
        if key not in orders:
            found = _computed_eagerly(lambda: original(grid, mosaic_params, random_seed), key[2:])
            if found is None:  # JAX's own function, traced into the program, as without the course
                return original(grid, mosaic_params, random_seed)
            orders[key] = found
        return tuple(jax.numpy.asarray(axis) for axis in orders[key])

    grid_order.tpucourse_ahead = True
    setattr(module, _GRID_ORDER, grid_order)
    return True


def _computed_eagerly(order, settings: tuple):
    """order()'s arrays as NumPy, computed now rather than traced; None where that cannot be done.

    Eagerly in this thread first. Inside an eager `jax.shard_map` (a per-device function called
    without jit), the trace names the mesh's manual axes and JAX cannot make the random key eagerly
    there (an assertion in its sharding code), so the same function then runs in a thread of its own,
    whose JAX context is the process's, provided the random-bit settings there are this thread's
    (`settings`: JAX's default PRNG and `jax_threefry_partitionable`; a setting made for one thread
    only would give other bits)."""
    import threading

    import jax
    import numpy as np

    try:
        with jax.ensure_compile_time_eval():
            return tuple(np.asarray(axis) for axis in order())
    except Exception:
        pass
    found = []

    def apart():
        if (jax.config.jax_default_prng_impl, jax.config.jax_threefry_partitionable) != settings:
            return
        try:
            found.append(tuple(np.asarray(axis) for axis in order()))
        except Exception:
            pass

    thread = threading.Thread(target=apart, name="tpucourse-grid-order")
    thread.start()
    thread.join()
    return found[0] if found else None


def interpret_mode_in_effect():
    """The Pallas TPU interpret mode this thread sees (None, True or InterpretParams)."""
    from jax._src import config as jax_config

    return jax_config.pallas_tpu_interpret_mode_context_manager.value


def jit_cache_context():
    """The JAX settings a jitted program's trace depends on (interpret mode, x64, meshes...), as
    the hashable value jit's own cache keys on."""
    from jax._src import config as jax_config

    return jax_config.trace_context()


def race_detection_options() -> dict:
    """InterpretParams fields that make the race detector report every race and go on, as
    0.10.2's does: `on_race="warn"` where the installed JAX has the field (0.12 raises on the
    first race by default, from inside the kernel, as if the learner's code had raised)."""
    import dataclasses

    from jax.experimental.pallas import tpu as pltpu

    fields = {field.name for field in dataclasses.fields(pltpu.InterpretParams)}
    return {"on_race": "warn"} if "on_race" in fields else {}


class _RaceReports(object):
    """A logging filter that takes the race detector's reports out of the log (0.12 logs them,
    0.10.2 prints) into a text stream: no other handler (pytest's captured log among them)
    shows the raw dump again."""

    def __init__(self, into):
        self.into = into

    def filter(self, record) -> bool:
        message = record.getMessage()
        if message.startswith("RACE DETECTED"):
            self.into.write(message + "\n")
            return False
        return True


_RACE_LOGGERS = ("", "jax._src.pallas.mosaic.interpret.race_detection_state",
                 "jax._src.pallas.mosaic.interpret")


@contextlib.contextmanager
def race_reports_into(printed):
    """Within the block, the race detector's reports go to `printed` (a text stream), whichever
    way the installed JAX reports them: printed (0.10.2, under the caller's redirect) or logged
    at warning level, some through the module's logger and some through the root one (0.12),
    and nowhere else."""
    import logging

    reports = _RaceReports(printed)
    loggers = [logging.getLogger(name) for name in _RACE_LOGGERS]
    for logger in loggers:
        logger.addFilter(reports)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(reports)


_RACE = re.compile(r"RACE DETECTED\s+(?P<first>read|write) of \((?P<memory>'?\w+'?)(?:,\s*\d+,\s*(?P<device>-?\d+))?"
                   r"[^)]*\)\[(?P<range>.*?)\] from (?P<by>[^\n]*)\n[^\n]*\n\s*(?P<second>read|write) of [^\[]*\[.*?\] "
                   r"from (?P<other>[^\n]*)")
_SLICE = re.compile(r"slice\((-?\d+), (-?\d+), (?:1|None)\)")
# The interpreter numbers its DMAs from 100 (its `dma_id_counter`), and its race detector names a
# copy's read or write by that number where it names a device's core by the device's.
_FIRST_DMA_ID = 100


def race_summary(printed: str, copies: dict[int, str] | None = None) -> str:
    """The race detector's reports in one line: how many, and the first in words ("a write and a
    write of one HBM block [0, 0, 0:128, 0:64], by core 0 and core 1 of device 0"); "" for none.
    copies: what each DMA the detector may name did (`device 2's copy into device 3`), by its id."""
    count = printed.count("RACE DETECTED")
    if not count:
        return ""
    found = _RACE.search(printed)
    what = f"{count} race{'s' if count != 1 else ''}"
    if found is None:
        return f"The race detector saw {what}."
    where = _SLICE.sub(lambda m: f"{m[1]}:{m[2]}", found["range"]).strip("()")
    memory = found["memory"].strip("'").upper()
    on = f" of device {found['device']}" if found["device"] is not None else ""
    by = [_who(found["by"]), _who(found["other"])]
    copies = copies or {}
    if all(by) and not any(_is_copy(who, copies) for who in by) and by[0][1] == by[1][1]:
        who, on = f", by cores {by[0][0]} and {by[1][0]} of device {by[0][1]}", ""
    elif all(by):
        who = f", by {_accessor(by[0], copies)} and {_accessor(by[1], copies)}"
    else:
        who = ""
    both = (f"two {found['first']}s" if found["first"] == found["second"]
            else f"a {found['first']} and a {found['second']}")
    return (f"The race detector saw {what}; the first: {both} of one {memory} block [{where}]{on}{who}, "
            f"neither ordered before the other.")


def _who(text: str):
    """(core, device or DMA id) from the detector's "0, 1, <where>" (0.10.2) or "(0, 1), <where>" (0.12)."""
    found = re.match(r"\s*\(?\s*(\d+),\s*(\d+)", text)
    return (found[2], found[1]) if found else None


def _is_copy(who, copies: dict[int, str]) -> bool:
    return int(who[1]) in copies or int(who[1]) >= _FIRST_DMA_ID


def _accessor(who, copies: dict[int, str]) -> str:
    """A reader or writer the race detector names: a core of a device, or a copy."""
    core, number = who
    if int(number) in copies:
        return copies[int(number)]
    if int(number) >= _FIRST_DMA_ID:
        return f"a copy (the interpreter's DMA {number})"
    return f"core {core} of device {number}"


def races_found() -> bool:
    """Whether the last run under `InterpretParams(detect_races=True)` found a race."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter

    races = interpreter.races
    return races is not None and bool(races.races_found)


def abort_tpu_interpreter() -> None:
    """Make a hung TPU-interpret-mode kernel raise in the thread running it.

    The interpreter's shared memory holds a failure flag that its semaphore waits poll
    every 0.1 s, and two barriers; setting the flag and aborting the barriers ends the wait.
    """
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
    except ImportError:
        return
    memory = getattr(interpreter, "_shared_memory", None)
    if memory is None:
        return
    with memory.lock:
        if getattr(memory, "_failure", None) is None:
            memory._failure = TimeoutError("the graded call passed its deadline")
    for barrier in (getattr(memory, "barrier", None), getattr(memory, "clean_up_barrier", None)):
        if barrier is not None:
            barrier.abort()
    interpreter.reset_tpu_interpret_mode_state()


def forget_abandoned_calls() -> None:
    """After an abandoned call: reset the interpreter and drop the runtime tokens it held."""
    from jax._src import dispatch
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()
    dispatch.runtime_tokens.clear()


# ---------------------------------------------------------------- thread-local settings

# Context managers JAX keeps outside `config_states` (meshes, devices, interpret mode).
_CONTEXT_CONFIGS = ("mesh_context_manager", "abstract_mesh_context_manager", "device_context",
                    "compute_on_context_manager", "xla_metadata_context_manager",
                    "pallas_tpu_interpret_mode_context_manager")


def thread_local_settings() -> list:
    """Every JAX setting the calling thread has set locally (interpret mode, x64, mesh, ...)."""
    from jax._src import config as jax_config

    configs = list(jax_config.config_states.values())
    configs += [getattr(jax_config, name) for name in _CONTEXT_CONFIGS if hasattr(jax_config, name)]
    unset = jax_config.config_ext.unset
    return [(config, value) for config in configs if (value := config.get_local()) is not unset]


@contextlib.contextmanager
def thread_local_settings_applied(settings: list):
    """Set another thread's local JAX settings (thread_local_settings()) in this one, as their
    context managers do, and undo them on exit."""
    previous = []
    try:
        for config, value in settings:
            previous.append((config, config.swap_local(value)))
            hook = getattr(config, "_update_thread_local_hook", None)
            if hook:
                hook(value)
        yield
    finally:
        for config, value in reversed(previous):
            config.set_local(value)


# ---------------------------------------------------------------- the chip a lowering targets

@contextlib.contextmanager
def tpu_info_for_this_device(chip_version: str):
    """Lower for `chip_version` (a pltpu.ChipVersion value) where this device is no TPU JAX knows.

    Some Mosaic lowering rules (integer `//`, `sign`) ask tpu_info about the local device;
    its registry maps a device kind to the chip's figures.
    """
    import jax
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as pltpu

    kind = jax.devices()[0].device_kind
    if kind in tpu_info.registry or tpu_info.chip_version_from_device_kind(kind) is not None:
        yield  # a real TPU, or a device JAX already knows
        return
    tpu_info.registry[kind] = lambda: pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(chip_version), 1)
    try:
        yield
    finally:
        tpu_info.registry.pop(kind, None)


# ---------------------------------------------------------------- MLIR

def mlir_context(with_tpu_dialect: bool = False):
    """JAX's own MLIR context (`jax._src.interpreters.mlir.make_ir_context`), with the Mosaic TPU
    dialect registered (`jax._src.lib.tpu`) when asked: what decoding a kernel's body needs."""
    from jax._src.interpreters import mlir as jax_mlir

    context = jax_mlir.make_ir_context()
    if with_tpu_dialect:
        from jax._src.lib import tpu

        tpu.register_dialect(context)
    return context


# ---------------------------------------------------------------- a pallas_call equation

def kernel_jaxpr(eqn):
    """The kernel body (an open jaxpr over its Refs) of a pallas_call equation."""
    return eqn.params["jaxpr"]


def equation_params(eqn) -> dict:
    """An equation's parameters (sub-jaxprs, trees, compile-time values): what a walk over nested
    programs or a re-bind of the primitive reads. Their names are JAX's own and change with it."""
    return eqn.params


def mosaic_compiler_params(pallas_eqn):
    """A pallas_call equation's `pltpu.CompilerParams` (collective_id, skip_device_barrier, ...),
    or None when it was given none."""
    params = pallas_eqn.params.get("compiler_params")
    if isinstance(params, dict):  # older jax: {"mosaic_tpu": CompilerParams(...)}
        params = params.get("mosaic_tpu") or params.get("mosaic")
    return params


def cond_branches(eqn) -> list:
    """The branches (closed jaxprs) of a `cond` equation (`pl.when`, `lax.cond`)."""
    return list(eqn.params["branches"])


def dma_start_operands(eqn) -> list:
    """A Pallas TPU `dma_start` equation's operands, unflattened: the device id comes last (None
    for a copy on this chip)."""
    import jax

    return jax.tree.unflatten(eqn.params["tree"], eqn.invars)


def semaphore_signal_operands(eqn) -> list:
    """A `semaphore_signal` equation's operands: (semaphore, transforms, increment, device id, core)."""
    import jax

    return jax.tree.unflatten(eqn.params["args_tree"], eqn.invars)


def scratch_avals(eqn) -> list:
    """(shape, dtype, memory space name) of each scratch buffer a pallas_call equation asks for."""
    count = eqn.params["grid_mapping"].num_scratch_operands
    kernel = kernel_jaxpr(eqn)
    found = []
    for var in kernel.invars[len(kernel.invars) - count:] if count else ():
        aval = var.aval
        inner = getattr(aval, "inner_aval", aval)
        found.append((tuple(inner.shape), inner.dtype, str(getattr(aval, "memory_space", "")).lower()))
    return found


@dataclass(frozen=True)
class OperandBlocks:
    """How one operand of a kernel (an input or an output) is cut into blocks."""

    position: int  # among the kernel's inputs, or among its outputs
    is_input: bool
    index_map: object  # a closed jaxpr: grid indices -> block indices
    block_shape: tuple  # per axis: an int, None, or a Blocked / Squeezed / Element / BoundedSlice
    array_shape: tuple
    dtype: object
    block_value_shape: tuple  # the block as the kernel sees it (squeezed axes dropped)
    memory_space: str  # lower-cased: "vmem", "any", "smem", ... or "default"
    buffer_count: int | None  # what pl.Buffered(n) asked for, else None
    origin: str = ""  # how the lowering names it: "args[0]", "outputs", "outputs[1]"
    index_map_at: str = ""  # where its index map was written ("<lambda> at file.py:41"): its BlockSpec

    @property
    def name(self) -> str:
        return f"{'input' if self.is_input else 'output'} {self.position}"


@dataclass(frozen=True)
class KernelGrid:
    """A pallas_call equation's grid and how each operand is cut into blocks over it."""

    grid: tuple[int, ...]
    inputs: tuple[OperandBlocks, ...]
    outputs: tuple[OperandBlocks, ...]
    static: bool  # index maps read only grid indices: no scalar prefetch, no dynamic grid bounds
    prefetch_vars: tuple = ()  # the equation's scalar-prefetch operands (jaxpr variables or literals)
    dynamic_grid: bool = False  # grid bounds given at run time


def kernel_grid(eqn) -> KernelGrid:
    """The grid and operand blocks of a pallas_call equation (its private `grid_mapping`)."""
    mapping = eqn.params["grid_mapping"]

    def operand(block, position: int, is_input: bool) -> OperandBlocks:
        aval = block.block_aval
        mode = getattr(block, "pipeline_mode", None)
        return OperandBlocks(
            position=position, is_input=is_input, index_map=block.index_map_jaxpr,
            block_shape=tuple(block.block_shape), array_shape=tuple(block.array_aval.shape),
            dtype=block.array_aval.dtype, block_value_shape=tuple(aval.shape),
            memory_space=str(getattr(aval, "memory_space", "default")).lower(),
            buffer_count=(int(mode.buffer_count) if mode is not None and getattr(mode, "buffer_count", None)
                          else None),
            origin=str(getattr(block, "origin", "")),
            index_map_at=_source_of(getattr(block.index_map_jaxpr, "jaxpr", None)))

    blocks = mapping.block_mappings
    inputs = tuple(operand(b, i, True) for i, b in enumerate(blocks[:mapping.num_inputs]))
    outputs = tuple(operand(b, i, False) for i, b in
                    enumerate(blocks[mapping.num_inputs:mapping.num_inputs + mapping.num_outputs]))
    first = len(eqn.invars) - mapping.num_inputs - mapping.num_index_operands
    return KernelGrid(grid=tuple(int(g) for g in mapping.grid), inputs=inputs, outputs=outputs,
                      static=not (mapping.num_index_operands or mapping.num_dynamic_grid_bounds),
                      prefetch_vars=tuple(eqn.invars[first:first + mapping.num_index_operands]),
                      dynamic_grid=bool(mapping.num_dynamic_grid_bounds))


def dimension_semantics(eqn) -> tuple[str, ...] | None:
    """A pallas_call's TPU dimension_semantics ("parallel", "arbitrary", ...), None where unset."""
    params = eqn.params.get("compiler_params")
    if isinstance(params, dict):
        params = params.get("mosaic_tpu") or next(iter(params.values()), None)
    semantics = getattr(params, "dimension_semantics", None)
    if semantics is None:
        return None
    return tuple(str(getattr(s, "value", s)).lower().rpartition(".")[2] for s in semantics)


def grid_axes_read(index_map, grid_rank: int) -> set[int]:
    """The grid axes an index map's result depends on (its first grid_rank arguments that it uses)."""
    jaxpr = index_map.jaxpr
    used, outvars = set(), [v for v in jaxpr.outvars if not hasattr(v, "val")]
    for eqn in jaxpr.eqns:
        used.update(id(v) for v in eqn.invars if not hasattr(v, "val"))
    used.update(id(v) for v in outvars)
    return {axis for axis, var in enumerate(jaxpr.invars[:grid_rank]) if id(var) in used}


def kernel_name(eqn) -> str:
    """The name of a pallas_call's kernel function (dq_kernel), or "" where none was kept."""
    info = getattr(eqn.params.get("jaxpr"), "debug_info", None)
    return eqn.params.get("name") or getattr(info, "func_name", "") or ""


def literal_value(var, otherwise=None):
    """A jaxpr atom's value if it is a literal, else `otherwise`."""
    from jax.extend import core as jex_core

    return var.val if isinstance(var, jex_core.Literal) else otherwise


def discharge_state(closed_jaxpr):
    """A closed jaxpr whose Ref reads are discharged into plain array reads (an index map
    that reads scalar-prefetch Refs becomes a function of their values)."""
    from jax._src.state import discharge as state_discharge

    return state_discharge.discharge_state(closed_jaxpr)


def kernel_source(eqn) -> str:
    """Where a pallas_call equation's kernel function was written: "matmul_kernel at file.py:20"."""
    return _source_of(kernel_jaxpr(eqn))


def _source_of(jaxpr) -> str:
    info = getattr(jaxpr, "debug_info", None)
    return str(getattr(info, "func_src_info", "") or "")


def block_dim(dim) -> tuple[int, bool]:
    """(elements per block along one axis, whether the index map returns element offsets)."""
    if dim is None:
        return 1, False
    if isinstance(dim, int):
        return dim, False
    name = type(dim).__name__
    if name == "Squeezed":
        return 1, False
    if name == "Blocked":
        return int(dim.block_size), False
    return int(getattr(dim, "block_size", 1)), True  # Element, BoundedSlice: offsets


# ---------------------------------------------------------------- a kernel, one grid step at a time
#
# A failed value check is explained by running the failing kernel again, one grid step at a time,
# as the generic interpreter (`interpret=True`) runs it: its body with every Ref discharged into
# plain arrays, each operand's block sliced out of the padded array at the start its index map
# gives (`hlo_interpreter.kernel_to_hlo_jaxpr`, `BlockMapping.compute_start_indices_interpret`),
# and `pl.program_id` answered by the grid environment (`pallas_core.grid_env`). The diagnosis
# (diagnosis/kernel_steps.py) walks that body equation by equation.


@dataclass(frozen=True)
class KernelStepProgram:
    """A pallas_call's body as a function of plain arrays, and how its operands are cut.

    body(*prefetch, *blocks of the inputs and outputs, *scratch) returns the new values of all of
    them, in that order."""

    body: object  # an open jaxpr
    consts: tuple
    grid: tuple[int, ...]
    num_prefetch: int
    num_inputs: int
    num_outputs: int
    block_shapes: tuple  # per input and output: the block's shape, squeezed axes as 1
    squeezed: tuple  # per input and output: which axes the kernel sees squeezed away
    scratch: tuple  # (shape, dtype) per scratch buffer
    arg_names: tuple  # the kernel function's parameter names, one per Ref ("x_ref", "acc_ref")


def kernel_step_program(eqn) -> KernelStepProgram | None:
    """The body of a pallas_call equation ready to run one grid step; None for what the generic
    interpreter's stepping cannot follow (a grid sized at run time, vmapped grid axes)."""
    from jax._src.pallas import core as pallas_core
    from jax._src.pallas import hlo_interpreter

    mapping = eqn.params["grid_mapping"]
    if mapping.num_dynamic_grid_bounds or getattr(mapping, "vmapped_dims", ()) \
            or getattr(mapping, "local_grid_env", None) is not None:
        return None
    body, consts, scratch_avals = hlo_interpreter.kernel_to_hlo_jaxpr(eqn.params["jaxpr"], (), mapping)
    blocks = mapping.block_mappings
    info = getattr(eqn.params["jaxpr"], "debug_info", None)
    return KernelStepProgram(
        body=body, consts=tuple(consts), grid=tuple(int(g) for g in mapping.grid),
        num_prefetch=mapping.num_index_operands, num_inputs=mapping.num_inputs,
        num_outputs=mapping.num_outputs,
        block_shapes=tuple(tuple(pallas_core._get_block_shape(b.block_shape)) for b in blocks),
        squeezed=tuple(tuple(isinstance(d, pallas_core.Squeezed) for d in b.block_shape) for b in blocks),
        scratch=tuple((tuple(a.shape), a.dtype) for a in scratch_avals),
        arg_names=tuple(getattr(info, "arg_names", None) or ()))


@contextlib.contextmanager
def at_grid_point(point, grid):
    """`pl.program_id` and `pl.num_programs` answer for this grid point within the block."""
    from jax._src.pallas import core as pallas_core

    with pallas_core.grid_env(tuple(pallas_core.GridAxis(int(i), int(n)) for i, n in zip(point, grid))):
        yield


def block_starts(eqn, point, prefetch) -> list[tuple[int, ...]]:
    """Where each input's and output's block starts (element offsets) at one grid point; prefetch:
    the values of the scalar-prefetch operands its index maps read."""
    import jax.numpy as jnp
    import numpy as np

    mapping = eqn.params["grid_mapping"]
    with at_grid_point(point, mapping.grid):
        starts = [block.compute_start_indices_interpret(tuple(jnp.int32(i) for i in point), *prefetch)
                  for block in mapping.block_mappings]
    return [tuple(int(np.asarray(s)) for s in start) for start in starts]


def user_location(eqn) -> str:
    """"file.py:12" of the user's line that made an equation, or "" where none is known."""
    from jax._src import source_info_util

    frame = source_info_util.user_frame(eqn.source_info.traceback)
    return f"{frame.file_name}:{frame.start_line}" if frame is not None else ""


# ---------------------------------------------------------------- shipped kernels

def flash_attention_with_residuals(q, k, v, *, causal: bool, scale: float, block_q: int, block_kv: int):
    """(out, l, m) from jax.experimental.pallas.ops.tpu.flash_attention's forward kernel.

    Its private `_flash_attention_impl` is the only entry point that returns the rows'
    normaliser l and max m (saved as residuals for the backward).
    """
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    return fa._flash_attention_impl(q, k, v, None, None, True, causal, scale, 1, block_q,
                                    block_kv, block_kv, False)


# ---------------------------------------------------------------- what simulated devices wait on
#
# What TPU interpret mode is doing inside a graded call: its waits, its deadlocks, its mode.
#
# A kernel that deadlocks under TPU interpret mode blocks one thread per simulated
# device inside the interpreter's semaphore wait, forever (the wait polls every 0.1 s
# for a failure flag and never gives up). `snapshot()` reads those threads' frames:
# which device waits, on which kind of semaphore (the barrier semaphore, a DMA
# semaphore, a scratch semaphore), for how much, what the semaphore holds, and, for DMA
# waits, the kernel line that waits. `join_watching` waits for a graded call like
# `Thread.join`, and returns early with the waits when they form a deadlock: every
# device blocked on a semaphore that holds too little, with no queued DMA that could
# add to it. Nothing can then ever signal, so the call is stopped at once instead of
# at the deadline.
#
# Private JAX API (jax 0.10.2, `JAX_VERSION`): the frames of
# `jax._src.pallas.mosaic.interpret.interpret_pallas_call`'s `semaphore_wait`,
# `dma_wait` and barrier callbacks, their local variables, the interpreter's
# `_shared_memory` (semaphore counts and queued DMA tasks), and JAX's config holder of
# the Pallas interpret mode. Every access is guarded: under another JAX version a
# snapshot is empty and no deadlock is ever found (the deadline still applies).


_INTERPRETER_FILE = "interpret_pallas_call.py"
_WAITS = {"semaphore_wait", "dma_wait"}
POLL_SECONDS = 0.25
# A deadlock must look the same for this long before the call is stopped: a thread that
# is about to be signalled leaves its wait within the interpreter's 0.1 s poll.
STABLE_SECONDS = 1.0

FINISHED = "end-of-kernel barrier"
ENTERING = "entry barrier"  # waiting for every device to enter a kernel that has no barrier semaphore
BUSY = "running"  # inside another interpreter step (a load, a store, an allocation)
CORE_FINISHED = "core finished"  # one simulated core of a device ran its kernel to the end
_BARRIERS = {"_barrier": ENTERING, "_clean_up_shared_memory": FINISHED}  # interpreter callback -> kind
_NOT_A_WAIT = (FINISHED, ENTERING, BUSY, CORE_FINISHED)
# Where the interpreter runs the simulated cores of a device, one thread each
# (`InterpretParams(num_cores_or_threads=N)`), and waits for them all.
_CORES_FILE, _CORES_FUNCTION = "thread_map.py", "_thread_map_callback"


@dataclass(frozen=True)
class BlockedWait:
    """One simulated device's thread, blocked in the interpreter."""

    device: int
    kind: str  # "barrier semaphore", "DMA semaphore", "semaphore", FINISHED, ENTERING or BUSY
    wants: int | None = None  # the count the wait needs (bytes, for a DMA semaphore)
    holds: int | None = None  # what the semaphore holds now
    where: str = ""  # the kernel's line, where the interpreter knows it (DMA waits)
    queued: int = 0  # DMAs queued on the semaphore that a wait would run (dma_execution_mode on_wait)
    core: int | None = None  # the simulated core, where a device has several; None: the device's own wait

    @property
    def hopeless(self) -> bool:
        """Nothing this device can do alone will ever satisfy the wait."""
        return self.kind in (FINISHED, ENTERING, CORE_FINISHED) or (
            self.holds is not None and self.wants is not None and self.holds < self.wants
            and self.queued == 0)

    @property
    def who(self) -> str:
        return f"device {self.device}" if self.core is None else f"device {self.device} core {self.core}"

    def describe(self) -> str:
        if self.kind == FINISHED:
            return "finished its kernel and waits for the other devices"
        if self.kind == CORE_FINISHED:
            return "finished its kernel and waits for the device's other cores"
        if self.kind == ENTERING:
            return "waits for the other devices to enter the kernel"
        if self.kind == BUSY:
            return f"not waiting: busy in the interpreter's {self.where}"
        unit = " bytes" if self.kind == "DMA semaphore" else ""
        text = f"waits on a {self.kind} for {self.wants}{unit} (it holds {self.holds})"
        return text + (f" at {self.where}" if self.where else "")


def snapshot() -> list[BlockedWait]:
    """Every simulated device thread blocked in a TPU-interpret-mode wait now, by device."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        memory = interpreter._shared_memory
        frames = list(sys._current_frames().values())
    except Exception:  # another JAX version: nothing to say
        return []
    if memory is None:
        return []
    found = []
    for frame in frames:
        try:
            found.extend(_waits_in(frame, memory))
        except Exception:
            pass
    waiting_cores = {w.device for w in found if w.core is not None and w.kind != CORE_FINISHED}
    found = [w for w in found if w.kind != CORE_FINISHED or w.device in waiting_cores]
    return sorted(found, key=lambda w: (w.device, -1 if w.core is None else w.core, w.kind, w.where))


def is_deadlock(waits: list[BlockedWait]) -> bool:
    """Every core of every device of the running kernel blocked for good (or finished), and at
    least one of them in a wait."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        memory = interpreter._shared_memory
        devices, cores = memory.num_devices, memory.num_cores_per_device
    except Exception:
        return False
    if not all(w.hopeless for w in waits) or all(w.kind in _NOT_A_WAIT for w in waits):
        return False
    if cores == 1:
        return len(waits) == devices and {w.device for w in waits} == set(range(devices))
    return all(any(w.device == device and w.core in (None, core) for w in waits)
               for device in range(devices) for core in range(cores))


def join_watching(thread, seconds: float, between=None) -> list[BlockedWait] | None:
    """Join `thread` for at most `seconds`; the waits of a deadlock found on the way, else None.

    between: called after every poll (it may raise, to stop waiting: a Ctrl-C, say).
    """
    end = time.monotonic() + seconds
    candidate, since = None, 0.0
    while thread.is_alive():
        left = end - time.monotonic()
        if left <= 0:
            return None
        thread.join(min(POLL_SECONDS, left))
        if between is not None:
            between()
        if not thread.is_alive():
            return None
        waits = snapshot()
        if not is_deadlock(waits):
            candidate = None
        elif waits != candidate:
            candidate, since = waits, time.monotonic()
        elif time.monotonic() - since >= STABLE_SECONDS:
            return waits
    return None


def summary_lines(waits: list[BlockedWait], limit: int = 6) -> list[str]:
    """One line per distinct wait, devices with the same wait grouped: 'devices 0-3: waits ...'
    (where a device has several simulated cores, each core's: 'device 0 core 1: ...')."""
    groups: dict[str, list[BlockedWait]] = {}
    for wait in waits:
        groups.setdefault(wait.describe(), []).append(wait)
    lines = []
    for text, group in sorted(groups.items(), key=lambda item: min((w.device, w.core or 0) for w in item[1])):
        if all(w.core is None for w in group):
            who = devices_text([w.device for w in group])
        else:
            who = ", ".join(dict.fromkeys(w.who for w in group))
        lines.append(f"{who}: {text}")
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def _waits_in(frame, memory) -> list[BlockedWait]:
    """What this thread's stack is blocked in: an interpreter wait (of the running kernel; a thread
    of an abandoned one is left out), or the cores of a device that have finished their kernel."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_INTERPRETER_FILE):
            if frame.f_locals.get("shared_memory", memory) is not memory:
                return []  # a kernel stopped earlier, whose thread has not unwound yet
            if code.co_name in _WAITS:
                return [_semaphore_wait(frame.f_locals, memory, dma=code.co_name == "dma_wait")]
            if code.co_name in _BARRIERS:  # they drop their device_id: read their wrapper's arguments
                caller = frame.f_back.f_locals.get("args", ()) if frame.f_back is not None else ()
                return [BlockedWait(int(caller[1]), _BARRIERS[code.co_name])] if len(caller) > 1 else []
            if "device_id" in frame.f_locals:
                return [BlockedWait(int(frame.f_locals["device_id"]), BUSY, where=code.co_name)]
        if code.co_filename.endswith(_CORES_FILE) and code.co_name == _CORES_FUNCTION:
            variables = frame.f_locals
            device = variables.get("device_id")
            return [BlockedWait(int(device), CORE_FINISHED, core=core)
                    for core, future in enumerate(variables.get("threads", ())) if future.done()
                    ] if device is not None else []
        frame = frame.f_back
    return []


def _semaphore_wait(variables, memory, *, dma: bool) -> BlockedWait:
    device, sem_id = int(variables["device_id"]), int(variables["sem_id"])
    local_core = int(variables.get("local_core_id", 0))
    core = memory.get_global_core_id(device, local_core)
    wants = int(variables["size"] if dma else variables["value"])
    barrier = sem_id in memory.fixed_id_sem
    semaphore = memory.fixed_id_sem.get(sem_id) if barrier else memory.sem.get(sem_id)
    holds, queued = None, 0
    if semaphore is not None:
        holds, queued = int(semaphore.count_by_core[core]), len(semaphore.tasks[core])
    kind = "barrier semaphore" if barrier else "DMA semaphore" if dma else "semaphore"
    return BlockedWait(device, kind, wants, holds, _where(variables.get("source_info")), queued,
                       core=local_core if memory.num_cores_per_device > 1 else None)


def _where(source_info) -> str:
    if source_info is None:
        return ""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(source_info)
    except Exception:
        return ""


def devices_text(devices: list[int]) -> str:
    devices = sorted(set(devices))
    if len(devices) == 1:
        return f"device {devices[0]}"
    if devices == list(range(devices[0], devices[-1] + 1)):
        return f"devices {devices[0]}-{devices[-1]}"
    return "devices " + ", ".join(map(str, devices))


_LEFT_NONZERO = re.compile(r"Semaphore (\d+) has non-zero count for (\d+) \(global core \d+\) at kernel "
                           r"exit: (-?\d+)")
# The interpreter numbers the semaphores a kernel allocates from 2000 on; lower ids are the
# fixed ones, the barrier semaphores of collective kernels (their collective_id).
_FIRST_ALLOCATED_SEMAPHORE = 2000


@dataclass(frozen=True)
class LeftSemaphore:
    """A semaphore not back at zero on one device when every device had ended its kernel."""

    sem: int  # the interpreter's id: a scratch semaphore's is _FIRST_ALLOCATED_SEMAPHORE + its index
    device: int
    count: int
    barrier: bool = False

    @property
    def scratch_index(self) -> int | None:
        """Its place among the kernel's scratch semaphores (arrays flattened), None for the barrier."""
        return None if self.barrier or self.sem < _FIRST_ALLOCATED_SEMAPHORE else self.sem - _FIRST_ALLOCATED_SEMAPHORE


def semaphores_left_nonzero(printed: str) -> list[LeftSemaphore]:
    """What TPU interpret mode printed about semaphores left non-zero at kernel exit. Each device
    prints its own as it leaves its kernel, the first one only, while other devices may still
    signal it: what `semaphores_left_at_kernel_end` records says the same without the timing."""
    return [LeftSemaphore(int(sem), int(device), int(count), barrier=int(sem) < _FIRST_ALLOCATED_SEMAPHORE)
            for sem, device, count in _LEFT_NONZERO.findall(printed)]


def left_semaphores_text(left: list[LeftSemaphore]) -> str:
    """Semaphores left counting, condensed by device: 'the barrier semaphore = 1 on devices 0-7;
    scratch semaphore 1 = 4096 on devices 0-1', or '' for none."""
    found: dict[tuple[str, int], list[int]] = {}
    for semaphore in left:
        index = semaphore.scratch_index
        name = "the barrier semaphore" if index is None else f"scratch semaphore {index}"
        found.setdefault((name, semaphore.count), []).append(semaphore.device)
    return "; ".join(f"{name} = {count} on {devices_text(devices)}" for (name, count), devices in sorted(found.items()))


@contextlib.contextmanager
def semaphores_left_at_kernel_end():
    """Within the block, every semaphore that is not back at zero once all devices have ended a
    kernel run is appended to the list this yields (LeftSemaphore, by device): read at the
    interpreter's clean-up barrier, when no device can signal any more, so the list does not
    depend on the order the device threads ran in. Under another JAX version it stays empty."""
    left: list[LeftSemaphore] = []
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        original = interpreter._clear_shared_memory
    except Exception:
        yield left
        return

    def clear():
        # The clean-up barrier's action (it is created with this function, module global, when a
        # kernel run starts) runs once every device has arrived; a reset after a hung call calls
        # it too, with the barrier aborted: nothing is read then.
        memory = interpreter._shared_memory
        try:
            if memory is not None and memory.clean_up_barrier.n_waiting == memory.num_devices:
                left.extend(_nonzero_semaphores(memory))
        except Exception:
            pass
        return original()

    interpreter._clear_shared_memory = clear
    try:
        yield left
    finally:
        interpreter._clear_shared_memory = original


def _nonzero_semaphores(memory) -> list[LeftSemaphore]:
    found = []
    semaphores = [(sem, False) for sem in memory.sem.values()] + [(sem, True) for sem in memory.fixed_id_sem.values()]
    for sem, barrier in semaphores:
        for device in range(memory.num_devices):
            for core in memory.get_global_core_ids(device):
                count = int(sem.count_by_core[core])
                if count:
                    found.append(LeftSemaphore(int(sem.id), device, count, barrier=barrier))
    return sorted(set(found), key=lambda s: (s.sem, s.device))


def scratch_semaphore_names(eqn) -> list[tuple[str, str]]:
    """(name, kind) of each scratch semaphore of a pallas_call equation, in the order the
    interpreter numbers them (scratch_shapes, arrays flattened): the kernel's parameter name
    (`send_sems[1]` for an element of an array) and "DMA" or "REGULAR"."""
    import itertools

    kernel = kernel_jaxpr(eqn)
    count = eqn.params["grid_mapping"].num_scratch_operands
    names = tuple(getattr(getattr(kernel, "debug_info", None), "arg_names", None) or ())
    invars = kernel.invars[len(kernel.invars) - count:] if count else []
    found = []
    for position, var in enumerate(invars, start=len(kernel.invars) - count):
        inner = getattr(var.aval, "inner_aval", var.aval)
        dtype = str(getattr(inner, "dtype", ""))
        if "sem" not in dtype:
            continue
        name = names[position] if position < len(names) and names[position] else f"scratch operand {position}"
        kind = "DMA" if "dma" in dtype else "REGULAR"
        shape = tuple(inner.shape)
        if not shape:
            found.append((name, kind))
            continue
        for index in itertools.product(*(range(n) for n in shape)):
            found.append((f"{name}[{', '.join(map(str, index))}]", kind))
    return found


# ---------------------------------------------------------------- source locations and the compilation cache
#
# JAX internals behind source locations in IR; written against jax 0.10.2.
#
# Every use of JAX's private modules for reading locations lives here, so a JAX upgrade
# touches one file (tests/test_xray.py exercises each piece):
#
# - equation_location: the innermost user frame of a jaxpr equation, through
#   `jax._src.source_info_util.user_frame` (jax.extend only exposes a summary string,
#   which lacks the end of the range).
# - current_locations: the persistent compilation cache keys a program on its text with
#   the debug information stripped (`jax._src.cache_key`), so by default a compile of
#   moved or copied code returns the executable cached for the old code, metadata and
#   all: stale lines, even another file's name. The public flag
#   `jax_compilation_cache_include_metadata_in_key` puts locations into the key. (Setting
#   `jax_enable_compilation_cache` to False mid-process does not help: once the cache
#   has been used it only changes the key, and entries under that key go stale too.)
# - persistent_cache: a persistent cache in a directory of one's choosing for a block,
#   through `jax._src.compilation_cache.reset_cache`, so tests can provoke the trap.




def equation_location(eqn):
    """Where the user's code created this jaxpr equation (a core.source_location.SourceLocation): its
    innermost non-JAX frame, or None."""
    from jax._src import source_info_util

    from .source_location import SourceLocation

    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return SourceLocation(frame.file_name, frame.start_line, frame.start_column, frame.end_line,
                          frame.end_column)


@contextlib.contextmanager
def current_locations():
    """Compiles inside this block carry the source's current locations, cache or no cache."""
    import jax

    previous = jax.config.jax_compilation_cache_include_metadata_in_key
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_include_metadata_in_key", previous)


_CACHE_SETTINGS = ("jax_compilation_cache_dir", "jax_enable_compilation_cache",
                   "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes")


@contextlib.contextmanager
def persistent_cache(directory: Path):
    """A persistent compilation cache in `directory` for this block; the previous one after.

    JAX initialises its cache once per process, from the settings of the first compile;
    reset_cache makes it read them again on entry and again on exit.
    """
    import jax
    from jax._src import compilation_cache

    saved = {name: getattr(jax.config, name) for name in _CACHE_SETTINGS}
    compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        yield Path(directory)
    finally:
        compilation_cache.reset_cache()
        for name, value in saved.items():
            jax.config.update(name, value)


# ---------------------------------------------------------------- programs with host callbacks
#
# Every kernel under TPU interpret mode is a program of host callbacks (each Ref access,
# DMA and semaphore is one), and so are the per-core programs the interpreter compiles
# while it runs a kernel on several simulated cores (`interpret/thread_map.py` compiles
# each with XLA's defaults, inside the run). JAX never writes such a program to its
# persistent cache, so every run of a kernel chapter compiled all of them again.
#
# The callbacks are not in the compiled code: the program refers to them by index (`index`
# of the custom call `xla_ffi_python_cpu_callback`), and they are handed to the executable
# when it is loaded, so an executable compiled once can be loaded again with the callbacks
# of a new lowering of the same program (`Client.deserialize_executable(...,
# host_callbacks=...)`). Only programs on one device are kept: serialising one over several
# devices with host callbacks crashes the process. The key is JAX's own cache key (the
# program's text, the compiler options, devices, backend and jaxlib versions; locations as
# `current_locations` says): equal keys mean equal compiled code, and the callbacks it calls
# are always this process's. The entries live in a directory of their own, since JAX reads
# its cache before it looks at callbacks and would load one without them; whoever sets the
# policy holds that directory to a size (kept_files), and each load marks its entry as used.
#
# Reaches into `jax._src.compiler.compile_or_get_cached` (wrapped once; it changes nothing
# until `compile_host_callback_programs` sets a policy) and
# `jax._src.compilation_cache.get_cache_key`.


@dataclass(frozen=True)
class HostCallbackPrograms:
    """How this process compiles programs with host callbacks on a CPU: `options`, XLA
    compiler options added where the caller set none of them, and `directory`, where the
    executables are kept across runs (None: compiled every time)."""

    directory: Path | None
    options: tuple = ()
    # Called once, in whichever thread compiles, when the first program not kept in `directory`
    # is compiled: the run's kernels changed since the last run (or this is the first).
    on_first_compile: object = field(default=None, compare=False)


_host_callback_programs: HostCallbackPrograms | None = None
_first_compile_seen = threading.Event()


def compile_host_callback_programs(policy: HostCallbackPrograms | None) -> HostCallbackPrograms | None:
    """Set the process-wide policy (None: as JAX compiles them); returns the previous one."""
    global _host_callback_programs
    _wrap_compile_or_get_cached()
    previous, _host_callback_programs = _host_callback_programs, policy
    _first_compile_seen.clear()
    return previous


def host_callback_programs() -> HostCallbackPrograms | None:
    """The policy in effect (compile_host_callback_programs), or None."""
    return _host_callback_programs


def _compiling_anew() -> None:
    policy = _host_callback_programs
    if policy is None or policy.on_first_compile is None or _first_compile_seen.is_set():
        return
    _first_compile_seen.set()
    try:
        policy.on_first_compile()
    except Exception:  # a speed-up only: whatever it met, the compile goes on
        pass


def _wrap_compile_or_get_cached() -> None:
    from jax._src import compiler

    original = compiler.compile_or_get_cached
    if getattr(original, "tpucourse_compiles_host_callback_programs", False):
        return

    @functools.wraps(original)
    def compile_or_get_cached(backend, computation, devices, compile_options, host_callbacks,
                              executable_devices, *args, **kwargs):
        policy = _host_callback_programs
        if policy is None or not host_callbacks or backend.platform != "cpu":
            return original(backend, computation, devices, compile_options, host_callbacks,
                            executable_devices, *args, **kwargs)
        set_by_caller = {name for name, _ in compile_options.env_option_overrides}
        if not set_by_caller & {name for name, _ in policy.options}:
            compile_options.env_option_overrides = [*compile_options.env_option_overrides, *policy.options]
        if policy.directory is None or len(executable_devices) != 1:
            return compiler.backend_compile_and_load(backend, computation, executable_devices,
                                                     compile_options, list(host_callbacks))
        return _cached_callback_program(policy.directory, backend, computation, devices, compile_options,
                                        list(host_callbacks), executable_devices)

    compile_or_get_cached.tpucourse_compiles_host_callback_programs = True
    compiler.compile_or_get_cached = compile_or_get_cached


def _cached_callback_program(directory: Path, backend, computation, devices, compile_options,
                             host_callbacks, executable_devices):
    """The loaded executable: from `directory` if compiled before, else compiled and kept there."""
    from jax._src import compilation_cache

    key = compilation_cache.get_cache_key(computation, devices, compile_options, backend)
    with _compiling(key):  # the simulated cores' threads compile the same program at once: one does
        return _load_or_compile(Path(directory) / key, backend, computation, compile_options, host_callbacks,
                                executable_devices)


_compile_locks: dict = {}
_compile_locks_guard = threading.Lock()


def _compiling(key: str):
    """The lock held while the program under `key` is loaded or compiled."""
    with _compile_locks_guard:
        return _compile_locks.setdefault(key, threading.Lock())


def _load_or_compile(path: Path, backend, computation, compile_options, host_callbacks, executable_devices):
    """The executable stored at `path`, loaded with these callbacks; else compiled and stored there."""
    import os

    from jax._src import compiler

    header = f"{len(host_callbacks)} host callbacks\n".encode()
    try:
        stored = path.read_bytes()
    except OSError:
        stored = b""
    if stored.startswith(header):
        try:
            executable = backend.deserialize_executable(stored[len(header):], executable_devices,
                                                        compile_options, host_callbacks=host_callbacks)
        except Exception:  # written by another jaxlib, or damaged: compiled again below
            pass
        else:
            kept_files.touch(path)
            return executable
    _compiling_anew()
    executable = compiler.backend_compile_and_load(backend, computation, executable_devices,
                                                   compile_options, host_callbacks)
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(header + executable.serialize())
        os.replace(partial, path)  # whole or not at all, whoever else writes the same key
    except Exception:  # a full disk, or a program that cannot be serialised: compiled next run
        partial.unlink(missing_ok=True)
    return executable


# ---------------------------------------------------------------- backends

def backends_started() -> bool:
    """Whether this process has started a JAX backend (and with it XLA's thread pools).

    `tpucourse watch` forks its runs from a process that imported JAX; a child forked
    after the backend started inherits its locks but none of its threads and can hang on
    the first compile. Asks `jax._src.xla_bridge.backends_are_initialized()`.
    """
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


# ---------------------------------------------------------------- what each device did
#
# The order in which TPU interpret mode runs the simulated devices is the OS's thread
# schedule: a wrong handshake or a reused semaphore shows in one run and hides in the next.
# What each device signals, waits for and copies, in its own program order, does not
# depend on that schedule, and is enough to judge the orderings a kernel proves
# (checking/device_order.py). It is read by wrapping the interpreter's Semaphore.signal and .wait
# (their caller, the interpreter's semaphore_signal / semaphore_wait / dma_wait callback,
# says which operation it is) and the DMA record's constructor, for the block's duration.

@dataclass(frozen=True)
class DeviceEvent:
    """One operation of one device's kernel, as the interpreter ran it."""

    kernel: int  # which kernel run (one per SharedMemory of the interpreter)
    device: int
    op: str  # "signal", "wait" (a regular or barrier semaphore), "copy" (a DMA start), "copy_wait"
    sem: int  # the semaphore: signalled, waited on, or the copy's receive semaphore
    barrier: bool = False
    peer: int | None = None  # signal: the device signalled; copy: the destination
    value: int = 0  # signal: the increment; wait: the count waited for
    send_sem: int | None = None  # copy: its send semaphore
    where: str = ""
    devices: int = 0  # how many devices the kernel run has: a peer outside 0 .. devices-1 names none
    dma: int | None = None  # copy: the interpreter's id of the DMA (the race detector names it)


@contextlib.contextmanager
def recording_device_events():
    """Within the block, every signal, wait and DMA start of TPU interpret mode is appended,
    per device in program order, to the list this yields. Under another JAX version the
    list stays empty (nothing is judged)."""
    events: list[DeviceEvent] = []
    lock = threading.Lock()
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        from jax._src.pallas.mosaic.interpret import shared_memory as memory_module
        semaphore, dma = memory_module.Semaphore, interpreter.DMA
        originals = semaphore.signal, semaphore.wait, dma.__init__
    except Exception:  # another JAX version: record nothing
        yield events
        return

    def add(event):
        with lock:
            events.append(event)

    def caller():
        frame = sys._getframe(2)
        return frame.f_code.co_name, frame.f_locals

    def signal(self, inc, global_core_id, clock, logging_info=None):
        name, variables = caller()
        if name == "semaphore_signal":
            memory = self.shared_memory
            add(DeviceEvent(id(memory), int(variables["device_id"]), "signal", self.id,
                            barrier=memory.fixed_id_sem.get(self.id) is self,
                            peer=int(variables["target_device_id"]), value=int(inc),
                            where=_where(variables.get("source_info")), devices=memory.num_devices))
        return originals[0](self, inc, global_core_id, clock, logging_info=logging_info)

    def wait(self, value, global_core_id, **kwargs):
        name, variables = caller()
        if name in ("semaphore_wait", "dma_wait"):
            memory = self.shared_memory
            add(DeviceEvent(id(memory), int(variables["device_id"]),
                            "wait" if name == "semaphore_wait" else "copy_wait", self.id,
                            barrier=memory.fixed_id_sem.get(self.id) is self, value=int(value),
                            where=_where(variables.get("source_info")), devices=memory.num_devices))
        return originals[1](self, value, global_core_id, **kwargs)

    def construct(self, *args, **kwargs):
        originals[2](self, *args, **kwargs)
        memory = self.dst_sem.shared_memory
        add(DeviceEvent(id(memory), int(self.src_device_id), "copy", self.dst_sem.id,
                        peer=int(self.dst_device_id),
                        send_sem=None if self.src_sem is None else self.src_sem.id,
                        where=_where(self.source_info), devices=memory.num_devices, dma=int(self.id)))

    semaphore.signal, semaphore.wait, dma.__init__ = signal, wait, construct
    try:
        yield events
    finally:
        semaphore.signal, semaphore.wait, dma.__init__ = originals
