"""What hardware JAX sees, and how a learner's plain `pl.pallas_call` runs on it.

Learner code never passes `interpret=`: the plugin switches JAX's global Pallas
interpret mode for the session instead, so the kernel a learner writes here is
byte for byte the kernel they run on a TPU.

Modes:
  auto  native on a TPU; TPU interpret mode everywhere else (the default).
  tpu   TPU interpret mode (`pltpu.InterpretParams`) even on a TPU. It simulates
        the TPU memory model: parallel grid axes run in a shuffled order (a
        reduction axis wrongly marked "parallel" gives wrong results),
        uninitialised memory reads NaN, out-of-bounds block indices raise.
  fast  the generic HLO interpreter (`interpret=True`): several times faster,
        for quick iteration. It poisons uninitialised floats with NaN too
        (`_initialize_output_vals`: outputs, scratch, the padding of ragged blocks;
        integers with their minimum), but runs the grid in order and clamps an
        out-of-bounds block index: blind to grid-order and bounds bugs.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from ..core import jax_internals

INTERPRET_MODES = ("auto", "tpu", "fast")
ACCELERATORS = ("tpu", "gpu")
# The global interpret mode before each select() that restore() has not undone yet, innermost last:
# a course run inside another (pytester in-process) puts the outer run's mode back when it ends.
_MODES_BEFORE: list = []


@dataclass(frozen=True)
class DeviceFacts:
    """What JAX reports about the device the tests run on. A run reads it once, when it starts
    (before any graded module is imported), and again whenever a measured gate row is written."""

    platform: str  # cpu, gpu, tpu
    device_kind: str
    device_count: int

    @property
    def is_accelerator(self) -> bool:
        return self.platform in ACCELERATORS


def device_facts() -> DeviceFacts:
    import jax

    devices = jax.devices()
    return DeviceFacts(jax.default_backend(), devices[0].device_kind, len(devices))


@dataclass(frozen=True)
class Backend:
    mode: str  # "native", "tpu-interpret" or "fast-interpret"
    platform: str  # what jax.default_backend() says: cpu, gpu, tpu
    device_kind: str
    jax_version: str
    jaxlib_version: str
    device_count: int = 1  # devices of the default backend: what a graded mesh is built from

    @property
    def describe_mode(self) -> str:
        return {
            "native": "natively (compiled by Mosaic)",
            "tpu-interpret": "TPU interpret mode (shuffled parallel grid axes, "
            "NaN-poisoned uninitialised memory, out-of-bounds block indices raise)",
            "fast-interpret": "the fast generic interpreter (interpret=True: uninitialised "
            "floats read NaN, but no grid shuffling, and out-of-bounds block indices clamp)",
        }[self.mode]


def tpu_interpret_params():
    from jax.experimental.pallas import tpu as pltpu

    # random_seed fixes the shuffled order of parallel grid axes, so a failing
    # run reproduces; the other fields are InterpretParams' own strict defaults.
    return pltpu.InterpretParams(random_seed=0)


DEFAULT_CPU_DEVICES = 8


def force_cpu_devices(count: int) -> int:
    """Ask for `count` CPU devices, before JAX starts its backends; returns the count in effect.

    The CPU device count is read once, when the first backend starts (the first
    `jax.devices()` or op), not at `import jax`: set later, it cannot change. Then
    the count the backend started with stays (a conftest that ran JAX at import,
    say) and the multi-device tests that need more skip, saying how many they need.
    On an accelerator the CPU backend is not the default one and this changes
    nothing the graded tests see: meshes are built from the accelerator's devices.
    """
    import jax

    if count < 1:
        raise ValueError(f"needs at least 1 CPU device, got {count}")
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backends already started: the count is fixed for this process
        pass
    return len(jax.devices("cpu"))


def select(requested: str) -> Backend:
    """Decide how Pallas kernels run in this session and switch JAX to it."""
    import jax
    import jaxlib
    from jax.experimental.pallas import tpu as pltpu

    if requested not in INTERPRET_MODES:
        raise ValueError(f"interpret mode must be one of {INTERPRET_MODES}, got {requested!r}")
    platform = jax.default_backend()
    _MODES_BEFORE.append(jax_internals.global_interpret_mode())
    jax_internals.read_interpret_mode_when_called()  # a kernel built at import obeys the mode too
    jax_internals.interpreter_callbacks_take_host_arrays()
    jax_internals.mlir_contexts_reused()
    jax_internals.grid_orders_computed_ahead()
    jax_internals.leave_out_gpu_interpreter(True)
    if requested == "fast":
        mode = "fast-interpret"
        pltpu.set_tpu_interpret_mode(True)
    elif requested == "auto" and platform == "tpu":
        mode = "native"
    else:
        mode = "tpu-interpret"
        pltpu.set_tpu_interpret_mode(tpu_interpret_params())
    return Backend(
        mode=mode,
        platform=platform,
        device_kind=jax.devices()[0].device_kind,
        device_count=len(jax.devices()),
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
    )


def use_compilation_cache(directory: Path | None) -> Path | None:
    """Keep compiled XLA programs on disk across pytest runs; returns the directory used.

    A learner re-runs the same graded tests again and again, and most of a pure-JAX
    chapter's time is compiling the same small programs (chapter 1's solutions: 18 s
    cold, 4.4 s with a warm cache). Every compile is cached, however short. Programs
    holding host callbacks (kernels under TPU interpret mode) are never cached by JAX;
    the session keeps them in a folder of this one (compiled.compile_kernel_programs).
    A directory set by the user (JAX_COMPILATION_CACHE_DIR) wins; None turns it off.
    """
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


def restore() -> None:
    """Undo select(): kernels run as JAX runs them without this plugin. A run inside another one's
    process (pytester in-process) puts back the interpret mode the outer run set and leaves its
    patches in place: the outer run's later tests still run their kernels its way."""
    before = _MODES_BEFORE.pop() if _MODES_BEFORE else None
    if _MODES_BEFORE:
        jax_internals.set_global_interpret_mode(before)
        return
    jax_internals.clear_global_interpret_mode()
    jax_internals.restore_interpret_mode_reading()
    jax_internals.leave_out_gpu_interpreter(False)


def reset_after_failure() -> None:
    """Forget the simulated TPU state a failing kernel left behind.

    TPU interpret mode keeps its simulated memory after an exception (for
    debugging); the next kernel would then see it, so one learner bug would
    poison every later test.
    """
    from jax.experimental.pallas import tpu as pltpu

    pltpu.reset_tpu_interpret_mode_state()


@contextlib.contextmanager
def quiet_callback_errors():
    """Mute the TPU interpreter's log of a failing host callback (a full traceback, logged
    before the error reaches the caller, whose message holds the same error)."""
    logger = logging.getLogger(jax_internals.CALLBACK_LOGGER)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous
