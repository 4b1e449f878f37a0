"""Every private JAX API this package touches, in one module. Read against jax 0.10.2.

Upgrading JAX means reading this file: each function below names what it reaches
into (`jax._src`, the TPU interpreter's module state, the tpu_info registry, the
parameters of a `pallas_call` equation, a private entry point of a shipped kernel)
and what the rest of the package relies on it for. Everything else uses public JAX.
JAX is imported inside the functions: importing this module loads nothing heavy.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

READ_AGAINST = "0.10.2"

# The TPU interpreter reports a failing host callback through this logger, with a
# full traceback, before the error reaches the caller.
CALLBACK_LOGGER = "jax._src.callback"


# ---------------------------------------------------------------- interpret mode

def clear_global_interpret_mode() -> None:
    """Undo `pltpu.set_tpu_interpret_mode` (JAX has no public way back to "not set")."""
    from jax._src import config as jax_config

    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(None)


def interpret_mode_in_effect():
    """The Pallas TPU interpret mode this thread sees (None, True or InterpretParams)."""
    from jax._src import config as jax_config

    return jax_config.pallas_tpu_interpret_mode_context_manager.value


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


# ---------------------------------------------------------------- a pallas_call equation

def kernel_jaxpr(eqn):
    """The kernel body (an open jaxpr over its Refs) of a pallas_call equation."""
    return eqn.params["jaxpr"]


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
class InputBlocks:
    """How one input of a kernel is cut into blocks: its index map over the grid, its block shape."""

    index_map: object  # a closed jaxpr: grid indices -> block indices
    block_shape: tuple  # per axis: an int, None, or a Blocked / Squeezed / Element / BoundedSlice
    array_shape: tuple


def grid_and_inputs(eqn) -> tuple[tuple[int, ...], list[InputBlocks], bool]:
    """(grid, each input's blocks, whether an index map reads scalar-prefetch operands or the
    grid bounds are dynamic) of a pallas_call equation."""
    mapping = eqn.params["grid_mapping"]
    grid = tuple(int(g) for g in mapping.grid)
    inputs = [InputBlocks(block.index_map_jaxpr, tuple(block.block_shape), tuple(block.array_aval.shape))
              for block in mapping.block_mappings[:mapping.num_inputs]]
    return grid, inputs, bool(mapping.num_index_operands or mapping.num_dynamic_grid_bounds)


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


# ---------------------------------------------------------------- shipped kernels

def flash_attention_with_residuals(q, k, v, *, causal: bool, scale: float, block_q: int, block_kv: int):
    """(out, l, m) from jax.experimental.pallas.ops.tpu.flash_attention's forward kernel.

    Its private `_flash_attention_impl` is the only entry point that returns the rows'
    normaliser l and max m (saved as residuals for the backward).
    """
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    return fa._flash_attention_impl(q, k, v, None, None, True, causal, scale, 1, block_q,
                                    block_kv, block_kv, False)
