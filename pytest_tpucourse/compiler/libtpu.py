"""Compile a kernel for a described TPU on a machine that has none: libtpu, ahead of time.

libtpu, the TPU compiler JAX runs on a TPU VM, also compiles on a CPU-only machine
for a *described* TPU: `jax.experimental.topologies.get_topology_desc("v5e:2x2")`
gives compile-only devices, and a program whose arguments are placed on one of
them is compiled by the real Mosaic and LLO compiler, while JAX itself stays on
the CPU (interpret mode keeps working in the same process). Nothing runs and
nothing is timed: what comes back is what the compiler decided (tiling errors,
the scoped-VMEM verdict, the optimized HLO) and, with dumps, the vector layouts
Mosaic chose and the final VLIW bundles of each kernel. Static compiler output,
never speed.

This module is the only one that touches libtpu, TPU topologies, the dump flags
and the dump files. Read against jax/jaxlib 0.10.2 and libtpu 0.0.42.1 (the pair
`jax[tpu]==0.10.2` installs; `pip install -e ".[tpu-compile]"`). The dump flags
(`--xla_mosaic_dump_to`, `--xla_jf_dump_to`, `--xla_jf_dump_llo_pass_label_regex`)
are internal and undocumented, and are read once, when libtpu starts: every compile
therefore runs in a child process started with them (one per process, reused), which
gets the program as a `jax.export` serialization. The child also keeps a libtpu crash
or a compile that outlives its deadline out of the test process.

On a TPU VM it is the same child: it compiles for the described chip beside the test
process that holds the real one, and never opens it (child_environment). Where
flatbuffers is missing there (`jax[tpu]` alone does not install it), the compiler checks
skip with the line naming it, even for the host's own chip, rather than compiling in the
test process with its TPU backend: that process already compiles every kernel the graded
tests run with the chip's own Mosaic, a refusal included; what the checks add (dumps,
the other chips, the described topology, results kept across runs, a deadline, a crash
that spares the process holding the chip) needs the child.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import queue
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..chips import DEFAULT_CHIP, Chip, get_chip
from ..core import kept_files

READ_AGAINST = "jax/jaxlib 0.10.2 with libtpu 0.0.42.1; jax/jaxlib 0.12.0.1 with libtpu 0.0.50.1"
INSTALL_LINE = "needs the real TPU compiler: pip install -e '.[tpu-compile]'"
NOT_SHIPPED_LINE = "not checked here (libtpu runs on Linux x86_64 only)"
FLATBUFFERS_LINE = ("needs flatbuffers to hand programs to the TPU compiler: pip install flatbuffers "
                    "(or pip install -e '.[tpu-compile]')")
# The libtpu releases whose figures the chapters quote (the pairs pyproject.toml installs):
# a figure that moved between them is kept once per release, where the lesson cannot
# derive it from the compiler at hand.
MEASURED_LIBTPU = ((0, 0, 42), (0, 0, 50))
NEWEST_MEASURED = MEASURED_LIBTPU[-1]


# What libtpu prints on stderr when it starts on a machine without a TPU: harmless.
_STARTUP_NOISE = re.compile(
    r"TPU_WORKER_HOSTNAMES|TPU accelerator type|Logging before InitGoogle|Source Location Trace"
    r"|libtpu_init_utils|^E0000 |^\s*$")


# ------------------------------------------------------------------ availability

_installed: bool | None = None
_available: bool | None = None


def ships_here() -> bool:
    """Whether libtpu has a wheel for this machine: Linux on x86_64 only (no Mac, no ARM)."""
    import platform

    return platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "amd64")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def installed() -> bool:
    """Whether libtpu can be imported here (the `tpu-compile` extra, or `jax[tpu]` on a TPU VM):
    JAX then starts it with its backends, and it prints its start-up lines."""
    global _installed
    if _installed is None:
        _installed = ships_here() and _importable("libtpu")
    return _installed


def available() -> bool:
    """Whether a program can be compiled for a described TPU here: libtpu is installed, and
    flatbuffers, which jax.export needs to hand the program to the compiling child."""
    global _available
    if _available is None:
        _available = unavailable_reason(ships=ships_here(), has_libtpu=installed(),
                                        has_flatbuffers=_importable("flatbuffers")) is None
    return _available


def unavailable_reason(*, ships: bool, has_libtpu: bool, has_flatbuffers: bool) -> str | None:
    """Why the compiler checks cannot run on a machine with these facts, in one line; None when
    they can. A TPU VM set up with `jax[tpu]` alone has libtpu and lacks flatbuffers."""
    if not ships:
        return NOT_SHIPPED_LINE
    if not has_libtpu:
        return INSTALL_LINE
    if not has_flatbuffers:
        return FLATBUFFERS_LINE
    return None


@functools.cache  # the process's: a libtpu installed meanwhile is another process's (served_runs.process_key)
def libtpu_version() -> str:
    """The installed libtpu's version ("0.0.42.1"), or "?" without the extra."""
    from importlib import metadata

    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return "?"


def libtpu_release() -> tuple[int, ...] | None:
    """The installed libtpu's release, its first three numbers ((0, 0, 42)); None without it."""
    numbers = re.findall(r"\d+", libtpu_version())[:3]
    return tuple(int(n) for n in numbers) if len(numbers) == 3 else None


def measured() -> bool:
    """Whether the installed libtpu is one whose figures the chapters quote (MEASURED_LIBTPU)."""
    return libtpu_release() in MEASURED_LIBTPU


def unmeasured_line() -> str:
    """What to say where the installed libtpu is none the course measured."""
    known = ", ".join(".".join(map(str, r)) for r in MEASURED_LIBTPU)
    return (f"libtpu {libtpu_version()} is not one this course was measured with ({known}): "
            f"its verdicts may have moved; pyproject.toml's tpu-compile extra installs a measured one")


def missing_line() -> str:
    """Why a compiler check cannot run here (unavailable_reason of this machine): no wheel for it,
    no libtpu, or no flatbuffers."""
    return unavailable_reason(ships=ships_here(), has_libtpu=installed(),
                              has_flatbuffers=_importable("flatbuffers")) or INSTALL_LINE


def _jax_version() -> str:
    import jax

    return jax.__version__


def skip_unless_available() -> None:
    """pytest.skip with one clear line when the compiler cannot run here (missing_line)."""
    if not available():
        import pytest

        pytest.skip(missing_line())


class TpuCompilerMissing(RuntimeError):
    def __init__(self):
        super().__init__(missing_line())


@contextlib.contextmanager
def quiet_libtpu_startup():
    """Drop libtpu's start-up lines from stderr (file descriptor 2) while the block runs.

    libtpu starts with the first JAX backend initialisation (or the first topology)
    and, off a TPU VM, writes "could not determine TPU accelerator type" and an
    `E0000 ... TPU_WORKER_HOSTNAMES` error from C++ straight to descriptor 2. Those
    lines are dropped; anything else written meanwhile is passed on.
    """
    if not installed():
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not _STARTUP_NOISE.search(line)]
            if kept:  # passed on as they came: what libtpu wrote, not the package's own words
                sys.stderr.write("\n".join(kept) + "\n")


# ------------------------------------------------------------------ results

@dataclass(frozen=True)
class VectorLayout:
    """A Mosaic vector layout, `#tpu.vpad<"32,{0,0},(8,128)">`: how a value sits in vregs.

    bitwidth: bits per element; offsets: where the value starts inside its first
    tile (None: replicated along that axis, printed `*`); tiling: the (rows, lanes)
    tile of elements; implicit_dim: "-1" or "-2" when the value has one dimension
    fewer than the layout (a 1-D vector, a reduction result), else None.
    """

    bitwidth: int
    offsets: tuple
    tiling: tuple
    implicit_dim: str | None = None

    @classmethod
    def parse(cls, text: str) -> VectorLayout | None:
        """The layout in `#tpu.vpad<"...">` text, or None for "none" (a scalar)."""
        match = re.search(r'"(\d+),\{([^}]*)\},\(([^)]*)\)(?:,(-?\d+))?"', text)
        if match is None:
            return None
        offsets = tuple(None if part.strip() == "*" else int(part) for part in match.group(2).split(","))
        tiling = tuple(int(part) for part in match.group(3).split(",") if part.strip())
        return cls(int(match.group(1)), offsets, tiling, match.group(4))


@dataclass(frozen=True)
class LaidOutValue:
    """One vector value of a kernel after Mosaic's layout passes, and its vreg count.

    vregs is the compiler's own count: the number of vregs `apply-vector-layout`
    unrolled the value into (the operands of its `tpu.roll_vectors`).
    """

    shape: tuple
    dtype: str
    layout: VectorLayout
    vregs: int


@dataclass(frozen=True)
class VmemAllocation:
    """One scoped-VMEM allocation of a kernel, from the compiler's VMEM report."""

    what: str  # "scratch operand", "input 0 window bf16[1,1,128,128] x2" ...
    shape: str  # as the compiler prints it: f32[128,1], u8[65536] for a window's raw bytes
    bytes: int
    padding: int  # bytes of it that hold no element (tile padding)


@dataclass(frozen=True)
class KernelOnTpu:
    """One pallas_call as the TPU compiler built it (from the dumps)."""

    name: str  # the Mosaic kernel function's name (the pallas_call's kernel)
    instruction: str  # its custom-call's name in the optimized HLO
    mosaic_layouts: str  # the Mosaic module after layout inference (`in_layout`/`out_layout` on every op)
    mosaic_unrolled: str  # after apply-vector-layout: every value split into vregs
    bundles_text: str  # the LLO final bundles: the VLIW program of the kernel
    scoped_vmem_bytes: int | None  # VMEM the kernel's windows and scratch take (all buffers)
    vmem_allocations: tuple = ()  # VmemAllocation each

    @property
    def bundles(self) -> int:
        """Static VLIW bundles of the whole kernel program (prologue, grid loop, epilogue)."""
        return len(_bundle_lines(self.bundles_text))

    @property
    def step_bundles(self) -> int:
        """Static bundles one grid step runs: those inside the grid loop (its branches included),
        or all of them when the kernel has no loop (a single step)."""
        return len(self._step_lines())

    def _step_lines(self) -> list[str]:
        lines = _bundle_lines(self.bundles_text)
        in_loop = [line for depth, line in lines if depth > 0]
        return in_loop or [line for _, line in lines]

    @property
    def mxu_ops(self) -> int:
        """Static `vmatmul` instructions in the kernel: each pushes rows of the left operand
        through the weights held in one MXU (the other MXU instructions load weights)."""
        return len(re.findall(r"\bvmatmul\.", self.bundles_text))

    @property
    def step_mxu_ops(self) -> int:
        """`vmatmul` instructions one grid step issues (in its bundles, as step_bundles counts them)."""
        return sum(len(re.findall(r"\bvmatmul\.", line)) for line in self._step_lines())

    @property
    def mxu_ops_by_unit(self) -> dict:
        """vmatmul instructions per MXU where the chip names them (`mxu0`, `mxu1`, ...)."""
        return dict(Counter(re.findall(r"\bvmatmul\.[\w.]*?\.(mxu\d+)\b", self.bundles_text)))

    @property
    def values(self) -> list[LaidOutValue]:
        """Every vector value the layout passes rolled back from vregs, with its count."""
        return _rolled_values(self.mosaic_unrolled)


@dataclass(frozen=True)
class CompiledForTpu:
    """What the real TPU compiler made of a program, for one chip. Nothing was run."""

    chip: str
    topology: str
    optimized_hlo: str
    compile_seconds: float
    kernels: tuple = ()  # KernelOnTpu per pallas_call, with dumps=True only
    dump_dir: Path | None = None  # this compile's dump files (removed when the process exits)
    device_kind: str = ""  # as the described devices name themselves: "TPU v5 lite"
    devices: int = 1  # the devices of the topology the program was compiled over
    from_cache: bool = False  # read from the results of an earlier run (compile_seconds is that run's)
    bytes_accessed: float | None = None  # XLA:TPU's cost analysis of the program ("bytes accessed")
    temp_bytes: int | None = None  # its buffer assignment's scratch (memory_analysis().temp_size_in_bytes)

    @property
    def compiler(self) -> str:
        """Who made optimized_hlo, for every place that shows it."""
        return (f"XLA:TPU of libtpu {libtpu_version()} with jax {_jax_version()}, ahead of time for "
                f"{self.devices} {self.device_kind or self.chip} device{'s' * (self.devices != 1)} of "
                f"topology {self.topology} on a host without a TPU: nothing ran")

    def kernel(self, name: str | None = None) -> KernelOnTpu:
        """The kernel called `name` (the only one if None)."""
        if not self.kernels:
            raise ValueError("no kernel dumps: compile with dumps=True")
        if name is None:
            if len(self.kernels) != 1:
                raise ValueError(f"{len(self.kernels)} kernels: name one of {[k.name for k in self.kernels]}")
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r}; kernels: {[k.name for k in self.kernels]}")


# ------------------------------------------------------------------ errors

class TpuCompileError(Exception):
    """The TPU compiler, or Pallas' TPU lowering before it, refused the program.

    str(error) is the course's wording; `detail` the compiler's own text. `kind` is
    what went wrong: "lowering" (Pallas' TPU lowering: a block shape, an op it cannot
    lower), "vmem" (the blocks and scratch do not fit), "tiling" (a block the dtype's
    tiling does not divide), "mosaic" (any other refusal of the Mosaic compiler) or
    "timeout" (the compile outlived its deadline).
    `code` is the compiler's error code where it gives one (E1001, E2002). Numbers
    are parsed where the compiler prints them.
    """

    def __init__(self, message: str, *, kind: str, code: str | None, kernel: str | None, chip_name: str,
                 detail: str, vmem_needed_bytes: int | None = None, vmem_limit_bytes: int | None = None,
                 operand: str | None = None, block_shape: tuple | None = None,
                 tiling: tuple | None = None, array_shape: tuple | None = None):
        super().__init__(message)
        self.message, self.kind = message, kind
        self.code, self.kernel, self.chip_name, self.detail = code, kernel, chip_name, detail
        self.vmem_needed_bytes, self.vmem_limit_bytes = vmem_needed_bytes, vmem_limit_bytes
        self.operand, self.block_shape, self.tiling, self.array_shape = operand, block_shape, tiling, array_shape


_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
_MAX_DETAIL_LINES = 4
# How the compiler words "does not fit in VMEM": E1001 (v5e, v5p, v6e, v7x), and v4's two forms.
_VMEM_OVER_LIMIT = (r"size ([\d.]+)([KMG]?) and limit ([\d.]+)([KMG]?)",
                    r"Used ([\d.]+)([KMG]?) of ([\d.]+)([KMG]?) vmem",
                    r"Allocation \(size=(\d+)()\) would exceed memory \(size=(\d+)()\)")


def translate(detail: str, *, chip_name: str, kernels: list[str], stage: str = "compile") -> TpuCompileError:
    """The compiler's error text, in the course's words (kernels: the program's kernel names)."""
    kernel = kernels[0] if len(kernels) == 1 else None
    who = f"kernel {kernel}" if kernel else (
        f"one of the kernels {', '.join(kernels)}" if kernels else "the program")
    common = dict(kernel=kernel, chip_name=chip_name, detail=detail)
    if stage == "lowering":
        return TpuCompileError(
            f"Pallas' TPU lowering rejects {who} before the compiler sees it:\n{_first_lines(detail)}",
            kind="lowering", code=None, **common)
    code_match = re.search(r"\b(E\d{4}):\s*(\w+)", detail)
    code = code_match.group(1) if code_match else None
    label = f" ({code} {code_match.group(2)})" if code_match else ""
    oom = next((m for m in (re.search(p, detail) for p in _VMEM_OVER_LIMIT) if m), None)
    if oom:
        needed = round(float(oom.group(1)) * _UNITS[oom.group(2)])
        limit = round(float(oom.group(3)) * _UNITS[oom.group(4)])
        raise_limit = (", or raise the scoped limit with pltpu.CompilerParams(vmem_limit_bytes=...) "
                       "up to the chip's VMEM" if code == "E1001" else "")
        return TpuCompileError(
            f"{who} needs {_mib(needed)} of VMEM on {chip_name} (its blocks, double-buffered, and its "
            f"scratch), over the compiler's limit of {_mib(limit)}{label}. Use smaller blocks{raise_limit}.",
            kind="vmem", code=code, vmem_needed_bytes=needed, vmem_limit_bytes=limit, **common)
    tiling = re.search(r"(input|output) (\d+)\b.*?Operand of shape \(([^)]*)\) has tiling \(([^)]*)\), "
                       r"but its block shape \(([^)]*)\)", detail, re.S)
    if tiling:
        operand = f"{tiling.group(1)} {tiling.group(2)}"
        array, tile, block = (_shape(tiling.group(i)) for i in (3, 4, 5))
        return TpuCompileError(
            f"{who}: the block {_dims(block)} of {operand} (an array {_dims(array)}) is neither a "
            f"multiple of the tiling {_dims(tile)} the compiler lays that array out in, nor the "
            f"array's full extent{label}. The tile depends on the dtype: (8,128) for 32-bit, "
            f"(16,128) for 16-bit, (32,128) for 8-bit elements.",
            kind="tiling", code=code, operand=operand, block_shape=block, tiling=tile, array_shape=array,
            **common)
    return TpuCompileError(
        f"the {chip_name} compiler rejects {who}{label or ' (Mosaic)'}:\n{_first_lines(detail)}",
        kind="mosaic", code=code, **common)


def _first_lines(text: str) -> str:
    # Imported here, not with the module: the compiling child process (`_serve`) imports this
    # module too, and core.outcomes would load pytest into it (0.09 s of every child's start).
    from ..core.outcomes import without_jax_advice

    drop = re.compile(r"^(See https://openxla|Please report a bug|The MLIR operation involved:)")
    lines = [line.strip() for line in without_jax_advice(text).splitlines() if not drop.match(line.strip())]
    lines = [re.sub(r"^(INTERNAL|INVALID_ARGUMENT|RESOURCE_EXHAUSTED|UNIMPLEMENTED): ", "", line)
             for line in lines]
    shown = lines[:_MAX_DETAIL_LINES] + (["..."] if len(lines) > _MAX_DETAIL_LINES else [])
    return "\n".join(f"  {line[:300]}" for line in shown)


def _shape(text: str) -> tuple:
    return tuple(part.strip() if part.strip() == "..." else int(part) for part in text.split(",") if part.strip())


def _dims(shape: tuple) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB"


# ------------------------------------------------------------------ compiling

DEFAULT_TIMEOUT_SECONDS = 120.0  # course blocks compile in 0.1-2.5 s; a 2048² f32 block took 50 s


def compile_for(fn, *args, chip: Chip | None = None, dumps: bool = False,
                timeout: float | None = DEFAULT_TIMEOUT_SECONDS, exported_program: _ExportedProgram | None = None,
                **kwargs) -> CompiledForTpu:
    """Compile fn(*args, **kwargs) for `chip` (None: the course's default chip) with the real TPU
    compiler, at the chip's compile topology; nothing runs. The result and its errors name the
    chip as given, a registered one included.

    args are arrays or ShapeDtypeStructs; kwargs are static. A program over several
    devices takes args sharded over a mesh of this host's devices (NamedSharding); it
    is compiled over as many devices of the chip's topology, the same shardings
    applied. The program is traced
    and lowered here (interpret mode off) and compiled in a child process whose
    libtpu started with the dump flags: a compiler crash or a compile that outlives
    `timeout` seconds ends that process, not this one. Where `keep_results_in` kept an
    earlier run's compile of the same program, that result is read instead (`from_cache`); where
    `compile_ahead` started this program's compile earlier in the run, its result is waited for.
    dumps=True keeps each kernel's layouts and bundles (`kernels`, `dump_dir`). exported_program: this
    program as `exported` gave it for the same chip, not exported again. Raises TpuCompileError
    (the verdict in the course's words) or TpuCompilerMissing; an error of fn's own
    while it is traced propagates unchanged.
    """
    if not available():
        raise TpuCompilerMissing()
    chip = chip or get_chip(DEFAULT_CHIP)
    program = exported_program or _ExportedProgram.of(fn, args, kwargs, chip)
    reply, dump_dir = _reply_started_ahead(program, dumps, timeout)
    if reply is None:
        reply, dump_dir = _stored_result(program.key, program.located, dumps)
    if reply is None:
        reply, dump_dir = _child_compiler().compile(program.serialized, program.topology, timeout,
                                                    mesh=program.mesh)
        _store_result(program.key, program.located, reply, dump_dir)
    try:
        if reply.get("timeout"):
            raise TpuCompileError(reply["error"], kind="timeout", code=None, kernel=None, chip_name=chip.name,
                                  detail=reply["error"])
        if not reply.get("ok"):
            raise translate(reply.get("error", "the compiling process failed"), chip_name=chip.name,
                            kernels=program.kernel_names)
        kernels = tuple(_read_kernels(dump_dir, reply["hlo"])) if dumps else ()
    finally:
        if not dumps and dump_dir is not None:
            shutil.rmtree(dump_dir, ignore_errors=True)
    return CompiledForTpu(chip.name, program.topology, reply["hlo"], reply["seconds"], kernels=kernels,
                          dump_dir=dump_dir if dumps else None, device_kind=reply.get("device_kind", ""),
                          devices=reply.get("devices", 1), from_cache=reply.get("from_cache", False),
                          bytes_accessed=reply.get("bytes_accessed"), temp_bytes=reply.get("temp_bytes"))


@dataclass(frozen=True)
class _ExportedProgram:
    """fn(*args, **kwargs) traced, lowered for a chip and serialized (jax.export): what the
    compiling child is sent, and the keys its result is kept under (_result_keys)."""

    serialized: bytes
    topology: str
    mesh: tuple | None
    key: str
    located: str
    kernel_names: list[str]

    @classmethod
    def of(cls, fn, args, kwargs, chip: Chip) -> _ExportedProgram:
        import jax
        from jax import export

        from ..readers import mosaic

        topology = _topology_name(chip)
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=_mesh_sharding(a)), args)
        jitted = jax.jit(_named(lambda *a: fn(*a, **kwargs), getattr(fn, "__name__", "program")))
        with mosaic.lowering_for(chip):
            jitted.trace(*shapes)  # the function's own errors (a stub, a bad shape) propagate as they are
            try:
                exported = export.export(jitted, platforms=["tpu"])(*shapes)
            except Exception as error:
                raise translate(f"{type(error).__name__}: {error}", chip_name=chip.name, kernels=[],
                                stage="lowering") from None
        names = [kernel.name for kernel in mosaic.decode_text(exported.mlir_module())]
        mesh = _mesh_axes(shapes)
        key, located = _result_keys(exported, topology, mesh)
        return cls(bytes(exported.serialize()), topology, mesh, key, located, names)


# ------------------------------------------------------------------ compiles started ahead
#
# A compile takes the child a tenth of a second to seconds, and the process that asked waits.
# A check that lowers a program for a TPU early in a run can start that program's compile in
# the background (compile_ahead): the child compiles on another core while the run goes on,
# and the compile check later in the run finds the result ready. The program is traced and
# lowered on the caller's thread, as compile_for does it; the background thread only hands the
# serialized program to the child and keeps the reply, so no graded code runs off the test's
# thread. A result nobody asks for is still kept (keep_results_in), for the next run.

_ahead: dict[str, tuple[str, "_Reply"]] = {}  # key -> (located, the compile's reply when it comes)
_ahead_lock = threading.Lock()
_ahead_queue: queue.SimpleQueue | None = None


class _Reply:
    """The reply of one compile handed to the background thread, once it is there."""

    def __init__(self):
        self.ready = threading.Event()
        self.reply: dict | None = None

    def wait(self, timeout: float | None) -> dict | None:
        """The reply, or None if none came within `timeout` seconds."""
        self.ready.wait(timeout)
        return self.reply


@dataclass(frozen=True)
class AheadCompile:
    """What compile_ahead did: exported the program for the chip (traced and lowered it for a TPU,
    Mosaic's lowering included), and started its compile (not where one was kept or running)."""

    exported: bool
    started: bool


def compile_ahead(fn, *args, chip: Chip | None = None, timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
                  after_the_run: bool = False, exported_program: _ExportedProgram | None = None,
                  **kwargs) -> AheadCompile:
    """Start compiling fn(*args, **kwargs) for `chip` now, in the background, for a compile_for of
    the same program later in this process (which waits for it, instead of compiling again).
    Nothing happens without libtpu, where the result is kept or started already, or where the
    program cannot be exported (compile_for reports that, when it is asked). after_the_run=True:
    the compile starts when the run ends (release_compiles_held), off the run's clock; its result
    is kept for the next run (a compile_for of it before then would wait: do not ask for one).
    exported_program: as compile_for's."""
    if not available():
        return AheadCompile(exported=False, started=False)
    program = exported_program or exported(fn, *args, chip=chip, **kwargs)
    if program is None:
        return AheadCompile(exported=False, started=False)
    reply = _Reply()
    with _ahead_lock:
        if program.key in _ahead or _result_kept(program.key, program.located):
            return AheadCompile(exported=True, started=False)
        _ahead[program.key] = (program.located, reply)
        if after_the_run:
            _held.append((program, timeout, reply, _results_directory))
            return AheadCompile(exported=True, started=True)
    _background_compiles().put((program, timeout, reply, _results_directory))
    return AheadCompile(exported=True, started=True)


_held: list = []  # compiles started ahead to begin when the run ends (compile_ahead, after_the_run)
# How a check whose compile was held for the run's end says so: its verdict comes with the next run.
VERDICT_NEXT_RUN = "runs in the background once this run has answered; the next run gives its verdict"


def release_compiles_held() -> None:
    """The run is over: the compiles held for its end begin, in the background, in order."""
    with _ahead_lock:
        held, _held[:] = list(_held), []
    for request in held:
        _background_compiles().put(request)


def exported(fn, *args, chip: Chip | None = None, keep_for_the_run: bool = False,
             **kwargs) -> _ExportedProgram | None:
    """fn(*args, **kwargs) exported for `chip` (traced and lowered for a TPU, serialized), for
    answers_now, compile_ahead and compile_for to share (an export of a gate's blocks takes a
    quarter of a second); None where it fails or libtpu is missing (compile_for then says why).

    keep_for_the_run=True (the course's checks of a graded call): the export is kept until the run
    ends (forget_exports) under the function object itself, its
    arguments' shapes, dtypes and shardings, its keyword arguments and the chip, with the JAX
    settings a trace reads: a lowering check and the compile check of the same call in one run
    export it once. The run's graded modules are imported once a run, so the same function object
    is the same code."""
    if not available():
        return None
    chip = chip or get_chip(DEFAULT_CHIP)
    key = _export_key(fn, args, kwargs, chip) if keep_for_the_run else None
    with _ahead_lock:
        if key is not None and key in _exports:
            return _exports[key]
    try:
        program = _ExportedProgram.of(fn, args, kwargs, chip)
    except Exception:
        return None
    if key is not None:
        with _ahead_lock:
            _exports[key] = program
    return program


_exports: dict = {}  # this run's exports (exported), forgotten when it ends


def _export_key(fn, args, kwargs, chip: Chip):
    """What an export is kept under (exported), or None for a function or argument that cannot be one."""
    import jax

    try:
        key = (fn, repr([(getattr(a, "shape", None), str(getattr(a, "dtype", None)), repr(getattr(a, "sharding", None)))
                         for a in jax.tree.leaves(args)]), repr(sorted(kwargs.items())), chip.name,
               str(jax.config.jax_default_matmul_precision), bool(jax.config.jax_enable_x64))
        hash(key)
    except Exception:  # an unhashable function, keywords that do not sort or print: exported each time
        return None
    return key


def forget_exports() -> None:
    """The run is over: its exports go (the next run imports the graded modules anew)."""
    with _ahead_lock:
        _exports.clear()


def answers_now(fn, *args, chip: Chip | None = None, exported_program: _ExportedProgram | None = None,
                **kwargs) -> bool:
    """Whether compile_for(fn, *args, **kwargs) would answer without waiting for a compile: its
    result is kept from an earlier one, or the compile started ahead has finished. Exports the
    program (traced and lowered for a TPU) unless given it; True where that fails (compile_for then
    says why at once)."""
    if not available():
        return True  # compile_for skips at once
    program = exported_program or exported(fn, *args, chip=chip, **kwargs)
    if program is None:
        return True  # compile_for reports the failure at once
    with _ahead_lock:
        _, pending = _ahead.get(program.key, (None, None))
    if pending is not None:
        return pending.ready.is_set()
    return _result_kept(program.key, program.located)


def _reply_started_ahead(program: _ExportedProgram, dumps: bool,
                         timeout: float | None) -> tuple[dict | None, Path | None]:
    """The reply of this program's compile started ahead, waited for up to `timeout` seconds (a
    timeout's reply after that, the compile left running for the next check of the program), or
    (None, None): none was started, it was stopped or lost (compiled again, with this call's
    timeout), or it is a refusal from other source locations (a refusal quotes them)."""
    with _ahead_lock:
        located, pending = _ahead.get(program.key, (None, None))
        held = [request for request in _held if request[2] is pending]
        for request in held:  # held for the run's end, but asked for now: it starts now
            _held.remove(request)
    if pending is None:
        return None, None
    for request in held:
        _background_compiles().put(request)
    reply = pending.wait(timeout)
    if reply is None:  # left for a later check of the same program to wait for again
        return _timed_out(timeout, "(it goes on in the background)"), None
    with _ahead_lock:
        if _ahead.get(program.key, (None, None))[1] is pending:
            del _ahead[program.key]
    if reply.get("timeout") or reply.get("lost") or (not reply.get("ok") and located != program.located):
        return None, None
    if not dumps:
        return reply, None
    kept, dump_dir = _stored_result(program.key, program.located, True)  # the dumps, as kept
    return ({**kept, "from_cache": False}, dump_dir) if kept is not None else (None, None)


def _background_compiles() -> queue.SimpleQueue:
    """The queue a daemon thread takes compiles from, one at a time (started at the first)."""
    global _ahead_queue
    with _ahead_lock:
        if _ahead_queue is None:
            _ahead_queue = queue.SimpleQueue()
            threading.Thread(target=_compile_in_background, args=(_ahead_queue,), name="tpucourse-compile-ahead",
                             daemon=True).start()
        return _ahead_queue


def _compile_in_background(requests: queue.SimpleQueue) -> None:
    while True:
        program, timeout, pending, directory = requests.get()
        try:
            reply, dump_dir = _child_compiler().compile(program.serialized, program.topology, timeout,
                                                        mesh=program.mesh)
            # Kept where the run that started it keeps results, though that run may have ended.
            _store_result(program.key, program.located, reply, dump_dir, directory)
            shutil.rmtree(dump_dir, ignore_errors=True)
            pending.reply = reply
        except Exception as error:  # the child could not be started or asked: compile_for tries itself
            pending.reply = {"ok": False, "lost": True, "error": str(error)}
        finally:
            pending.ready.set()


def forget_compiles_ahead() -> None:
    """The run is over: forget the finished compiles started ahead that nobody asked for (kept by
    keep_results_in, for the next run). One still running stays, for a next run in this process."""
    with _ahead_lock:
        for key in [key for key, (_, pending) in _ahead.items() if pending.ready.is_set()]:
            del _ahead[key]


def _mesh_sharding(array):
    """An argument's sharding when it spans several devices (kept for the export), else None."""
    sharding = getattr(array, "sharding", None)
    return sharding if sharding is not None and len(sharding.device_set) > 1 else None


def _mesh_axes(shapes) -> tuple | None:
    """(axis names, axis sizes) of the mesh the arguments are sharded over, None on one device."""
    import jax

    for shape in jax.tree.leaves(shapes):
        mesh = getattr(shape.sharding, "mesh", None)
        if mesh is not None:
            return tuple(mesh.axis_names), tuple(mesh.devices.shape)
    return None


def _topology_name(chip: Chip) -> str:
    """The compile-only topology of a chip (the chip table's, or a registered Chip's own)."""
    if chip.compile_topology is None:
        raise ValueError(f"chip {chip.name!r} has no compile_topology: libtpu cannot compile for it")
    return chip.compile_topology


# ------------------------------------------------------------------ results kept across runs
#
# A learner re-runs the same graded tests many times, and each compile for a described TPU
# costs a child process's start (libtpu's) and up to seconds per program. The compiler is a
# pure function of the exported program (its StableHLO and Mosaic payloads), the topology,
# the mesh, the compiler's version and its flags, so its verdict and the dump files the
# course reads are kept under that key (`keep_results_in`, set by the session to a folder
# of --jax-cache, held to a size by kept_files when the run ends). A timeout or a crashed compiler is never
# kept. The optimized HLO of a kept result carries the source locations of the run that
# compiled it.

_results_directory: Path | None = None
_REPLY_HOLDS = "hlo, seconds, device kind, devices, bytes accessed, temp bytes"  # a reply kept without one is not read
_KEPT_DUMPS = ("mosaic/*post-infer-vector-layout*", "mosaic/*post-apply-vector-layout*",
               "llo/*-final_bundles.txt", "llo/*vmem_report.html")  # what _read_kernels reads


def keep_results_in(directory: Path | None) -> Path | None:
    """Keep compile results in `directory` across runs (None: compile every time); returns the
    folder kept in until now, which is held to its size (kept_files) as it is left: once a run,
    at its end."""
    global _results_directory
    previous, _results_directory = _results_directory, directory
    if previous is not None and previous != directory:
        kept_files.trim(previous)
    return previous


def _result_keys(exported, topology: str, mesh: tuple | None) -> tuple[str, str]:
    """(key, located): what the compiler's result depends on, and the same with the source
    locations of the program's kernels.

    The key holds no location at all: they hold the Python stack that traced the program,
    which differs between call sites of one program and moves with every line a learner adds
    above a kernel's code, and the compiled program does not depend on them. Each kernel's
    Mosaic body (bytecode inside the program's tpu_custom_call) carries its own, so each is
    read back and printed without them. A refusal quotes locations in its message: it is
    reused only where `located` is the same (_stored_result).
    """
    import hashlib

    from jaxlib.mlir import ir

    from ..core import jax_internals

    with jax_internals.mlir_context():
        module = ir.Module.parse(exported.mlir_module())
        located = module.operation.get_asm(enable_debug_info=False)
        _kernel_bodies_without_locations(module)
        text = module.operation.get_asm(enable_debug_info=False)
    keys = []
    for program in (text, located):
        digest = hashlib.sha256(program.encode())
        for part in (exported.in_shardings_hlo, exported.out_shardings_hlo, exported.nr_devices,
                     exported.platforms, exported.ordered_effects, exported.calling_convention_version,
                     topology, mesh, libtpu_version(), _jax_version(), READ_AGAINST, _REPLY_HOLDS,
                     os.environ.get("LIBTPU_INIT_ARGS", "")):
            digest.update(b"\0" + repr(part).encode())
        keys.append(digest.hexdigest())
    return keys[0], keys[1]


def _kernel_bodies_without_locations(module) -> None:
    """Replace each tpu_custom_call's Mosaic body, in place, by the digest of its text without locations."""
    import base64
    import hashlib

    from jaxlib.mlir import ir

    from ..core import jax_internals
    from ..readers import mosaic

    for call in mosaic.tpu_custom_calls(module.operation):
        config = json.loads(ir.StringAttr(call.attributes["backend_config"]).value)
        body = config.get("custom_call_config", {}).get("body")
        if not isinstance(body, str):
            continue
        context = jax_internals.mlir_context(with_tpu_dialect=True)
        with context, ir.Location.unknown():
            context.allow_unregistered_dialects = True
            kernel = ir.Module.parse(base64.b64decode(body)).operation.get_asm(enable_debug_info=False)
        config["custom_call_config"]["body"] = hashlib.sha256(kernel.encode()).hexdigest()
        call.attributes["backend_config"] = ir.StringAttr.get(json.dumps(config, sort_keys=True))


def _stored_result(key: str, located: str, with_dumps: bool) -> tuple[dict | None, Path | None]:
    """(the reply, a fresh copy of its dumps if asked) of an earlier compile of this program,
    or (None, None). A refusal counts only if compiled from the same locations (it quotes them)."""
    if _results_directory is None:
        return None, None
    stored, copy = _results_directory / key, None
    try:
        reply = json.loads((stored / "reply.json").read_text())
        if not reply.get("ok") and reply.get("located") != located:
            return None, None
        if with_dumps:
            copy = Path(tempfile.mkdtemp(prefix="tpucourse-tpu-compile-kept-"))
            atexit.register(shutil.rmtree, copy, True)
            shutil.copytree(stored / "dumps", copy, dirs_exist_ok=True)
    except (OSError, ValueError):
        return None, None
    kept_files.touch(stored)
    return {**reply, "from_cache": True}, copy


def _result_kept(key: str, located: str) -> bool:
    """An earlier compile of this program is kept, as _stored_result would read it."""
    if _results_directory is None:
        return False
    try:
        reply = json.loads((_results_directory / key / "reply.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(reply.get("ok")) or reply.get("located") == located


def _store_result(key: str, located: str, reply: dict, dump_dir: Path, directory: Path | None = None) -> None:
    directory = directory if directory is not None else _results_directory
    if directory is None or reply.get("timeout") or reply.get("lost"):
        return
    reply = {**reply, "located": located}
    target = directory / key
    partial = directory / f"{key}.{os.getpid()}.{threading.get_ident()}.partial"
    try:
        (partial / "dumps").mkdir(parents=True)
        for pattern in _KEPT_DUMPS:
            for path in dump_dir.glob(pattern):
                (partial / "dumps" / path.parent.name).mkdir(exist_ok=True)
                shutil.copy2(path, partial / "dumps" / path.parent.name / path.name)
        (partial / "reply.json").write_text(json.dumps(reply))
        os.rename(partial, target)  # whole or not at all; another run that kept it first wins
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def _timed_out(timeout: float, what_then: str) -> dict:
    return {"ok": False, "timeout": True,
            "error": f"the compiler did not finish within {timeout:g} s {what_then}: blocks of many MiB "
                     f"take minutes to compile (a 2048 x 2048 f32 block took 50 s)"}


_FILE_PREFIX = re.compile(r"^(\d+)-")


def child_environment(parent, root: Path) -> dict[str, str]:
    """The environment of a compiling child started from `parent`'s, its files under `root`.

    The child never opens a TPU, on a TPU VM too, where the process that starts it may hold
    the chip: JAX_PLATFORMS=cpu keeps JAX from starting its TPU backend (the described
    topology's devices need none), and ALLOW_MULTIPLE_LIBTPU_LOAD lets its libtpu start
    beside the one that holds the chip. Without it libtpu takes /tmp/libtpu_lockfile when it
    makes a topology and refuses a second process ("Internal error when accessing libtpu
    multi-process lockfile"): the test process on a TPU VM, an xdist worker, another run.
    """
    env = dict(parent)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.update({
        "JAX_PLATFORMS": "cpu",
        "JAX_ENABLE_COMPILATION_CACHE": "false",  # a cached executable would skip the compiler
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "TPU_LOG_DIR": str(root / "logs"),
        "LIBTPU_INIT_ARGS": " ".join([
            env.get("LIBTPU_INIT_ARGS", ""),
            f"--xla_mosaic_dump_to={root / 'mosaic'}",
            f"--xla_jf_dump_to={root / 'llo'}",
            "--xla_jf_dump_llo_pass_label_regex=final_bundles",
        ]).strip(),
    })
    return env


class _ChildCompiler:
    """A child Python process whose libtpu started with the dump flags; compiles one program at a time.

    The parent serializes the program with `jax.export` (StableHLO, each kernel's
    Mosaic payload inside); the child compiles it for the topology; the files the
    compile dumped are moved to a directory of their own. The flags are read once,
    when libtpu starts, which is why this is a process of its own.
    """

    def __init__(self, prepare: str | None = None):
        """prepare: a topology the child makes as soon as JAX is imported, before any request."""
        self.root = Path(tempfile.mkdtemp(prefix="tpucourse-tpu-compile-"))
        self.mosaic_dir, self.llo_dir = self.root / "mosaic", self.root / "llo"
        self.count = 0
        self.asked = False  # a child started ahead of need and never asked is stopped, not waited for
        self.lock = threading.Lock()
        env = child_environment(os.environ, self.root)
        # stderr goes to a file: a pipe nobody reads would fill up and stall the child.
        self.stderr_path = self.root / "stderr.txt"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pytest_tpucourse.compiler.libtpu", "--serve", *([prepare] if prepare else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        atexit.register(self.close)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def compile(self, program: bytes, topology: str, timeout: float | None,
                mesh: tuple | None = None) -> tuple[dict, Path]:
        """(the child's reply, the directory holding this compile's dumps); mesh: (axis names, sizes)."""
        with self.lock:
            self.asked = True
            self.count += 1
            path = self.root / f"program-{self.count}.bin"
            path.write_bytes(program)
            reply = self._ask({"program": str(path), "topology": topology, "mesh": mesh}, timeout)
            path.unlink()
            return reply, self._collect(self.root / f"compile-{self.count}")

    def _ask(self, request: dict, timeout: float | None) -> dict:
        if not self.alive:
            return {"ok": False, "lost": True, "error": "the compiling process exited: " + self._stderr()}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.process.kill()
            self.process.wait()  # reaped now: the next compile must see a dead child and start another
            return _timed_out(timeout, "and was stopped")
        line = self.process.stdout.readline()
        if not line:
            return {"ok": False, "lost": True, "error": "the compiling process died: " + self._stderr()}
        return json.loads(line)

    def _stderr(self) -> str:
        try:
            self.process.wait(timeout=5)
            text = self.stderr_path.read_text(errors="replace")
        except Exception:
            text = ""
        kept = [line for line in text.splitlines() if not _STARTUP_NOISE.search(line)]
        return "\n".join(kept[-_MAX_DETAIL_LINES:])

    def _collect(self, destination: Path) -> Path:
        """Move the files dumped so far to `destination` (mosaic/ and llo/ under it)."""
        for kind, source in (("mosaic", self.mosaic_dir), ("llo", self.llo_dir)):
            target = destination / kind
            target.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                for path in source.iterdir():
                    path.rename(target / path.name)
        return destination

    def close(self) -> None:
        # Stopped, not waited for: a child started ahead of a compile that never came (still importing,
        # maybe), or one compiling a program started ahead (compile_ahead) that nobody asked for before
        # the process ended (the lock is held only while a compile runs, and an exit waits for none).
        if self.alive and (not self.asked or self.lock.locked()):
            self.process.kill()
            self.process.wait()
        if self.alive:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


_compiler: _ChildCompiler | None = None


def _child_compiler(prepare: str | None = None) -> _ChildCompiler:
    """The running compiling child, or a new one (`prepare`: the topology it makes as it starts)."""
    global _compiler
    with _starting:
        if _compiler is None or not _compiler.alive:
            _compiler = _ChildCompiler(prepare)
        return _compiler


_starting = threading.Lock()


def start_compiler_ahead() -> None:
    """Start the compiling child now, in the background, if it is not running, so that a compile
    asked for later finds Python, JAX and libtpu already started in it (about 0.6 s, which the
    child spends while this process goes on). For a run whose kernels just changed: the compiles
    kept from earlier runs will miss too. Costs a child's start (CPU, not wall time on a machine
    with a core to spare) where no compile comes; the child is then stopped at exit."""
    if available():
        _child_compiler(prepare=_topology_name(get_chip(DEFAULT_CHIP)))


def _read_kernels(dump_dir: Path, optimized_hlo: str) -> list[KernelOnTpu]:
    """Each kernel's Mosaic passes, bundles and VMEM, matched by the Mosaic function name."""
    mosaic_runs: dict[str, dict[str, str]] = {}
    for path in sorted((dump_dir / "mosaic").glob("*-mosaic-dump-*.txt")):
        prefix = _FILE_PREFIX.match(path.name).group(1)
        stage = path.name.split("-mosaic-dump-", 1)[1].removesuffix(".txt")
        mosaic_runs.setdefault(prefix, {})[stage] = path.read_text(errors="replace")
    instructions = _kernel_instructions(optimized_hlo)
    vmem = _scoped_vmem(dump_dir / "llo")
    bundles = {}
    for path in (dump_dir / "llo").glob("*-final_bundles.txt"):
        if "schedule-analysis" in path.name:
            continue
        instruction = re.sub(r"^\d+-", "", path.name).rsplit("-", 2)[0]
        bundles[instruction] = path.read_text(errors="replace")
    kernels = []
    for stages in mosaic_runs.values():
        inferred = next((text for stage, text in stages.items() if stage.endswith("post-infer-vector-layout")), None)
        if inferred is None:
            continue  # the short deserialization-only runs
        unrolled = next((text for stage, text in stages.items() if stage.endswith("post-apply-vector-layout")), "")
        name_match = re.search(r"func\.func @(\w+)\(", inferred)
        name = name_match.group(1) if name_match else "?"
        instruction = instructions.get(name, "")
        kernels.append(KernelOnTpu(name=name, instruction=instruction, mosaic_layouts=inferred,
                                   mosaic_unrolled=unrolled, bundles_text=bundles.get(instruction, ""),
                                   scoped_vmem_bytes=vmem.get(instruction, (None, ()))[0],
                                   vmem_allocations=vmem.get(instruction, (None, ()))[1]))
    return kernels


# A tpu_custom_call instruction and its Mosaic body, within the one instruction: its attributes may
# span lines (a kernel inside shard_map carries a frontend attribute with newlines), never the next
# instruction's `  %name = ` or `  ROOT %name = `.
_WITHIN_ONE_INSTRUCTION = r"(?:(?!\n\s*(?:ROOT\s+)?%[\w.\-]+ = )[\s\S])*?"
_KERNEL_INSTRUCTION = re.compile(r'%([\w.\-]+) = ' + _WITHIN_ONE_INSTRUCTION + r'custom_call_target="tpu_custom_call"'
                                 + _WITHIN_ONE_INSTRUCTION + r'"body":\s*"([A-Za-z0-9+/=]+)"')


def _kernel_instructions(optimized_hlo: str) -> dict[str, str]:
    """Mosaic kernel name -> the name of the custom-call instruction that runs it."""
    import base64

    from ..readers import mosaic

    found = {}
    for match in re.finditer(_KERNEL_INSTRUCTION, optimized_hlo):
        body = base64.b64decode(match.group(2))
        found[mosaic.decode_body(body).name] = match.group(1)
    return found


def _scoped_vmem(llo_dir: Path) -> dict[str, tuple[int, tuple]]:
    """(scoped VMEM bytes, its allocations) per custom-call instruction, from the VMEM report."""
    found = {}
    for path in llo_dir.glob("*vmem_report.html"):
        match = re.search(r"const DATA\s*=\s*(\{.*?\});\s*\n", path.read_text(errors="replace"), re.S)
        if match is None:
            continue
        for name, breakdown in json.loads(match.group(1)).get("hlo_breakdowns", {}).items():
            if name.startswith("<"):
                continue
            allocations = tuple(
                VmemAllocation(_allocation_name(a.get("tag", "")), a.get("shape", "?"), int(a.get("size", 0)),
                               int(a.get("padding", 0)))
                for block in breakdown.get("blocks", ()) for a in block.get("allocations", ()))
            found[name] = (int(breakdown.get("total_size", 0)), allocations)
    return found


def _allocation_name(tag: str) -> str:
    """"input window allocation for operator input 0. The window shape is bf16[256,256], ...
    This allocation has 2 buffering levels." -> "input 0 window bf16[256,256] x2"."""
    operand = re.search(r"for operator (input|output) (\d+)", tag)
    if operand is None:
        return tag.split(".")[0]
    window = re.search(r"window shape is (\w+\[[^\]]*\])", tag)
    levels = re.search(r"has (\d+) buffering levels", tag)
    return (f"{operand.group(1)} {operand.group(2)} window" + (f" {window.group(1)}" if window else "")
            + (f" x{levels.group(1)}" if levels else ""))


def _bundle_lines(text: str) -> list[tuple[int, str]]:
    """(loop depth, line) of every bundle: lines `  0x1f LB: > { ... }`; each `>` is one loop level."""
    lines = []
    for line in text.splitlines():
        match = re.match(r"^\s*(?:0x[0-9a-f]+|0)\s+(?:[A-Z]{2})?:\s*(>*)\s*\{", line)
        if match:
            lines.append((len(match.group(1)), line))
    return lines


def _rolled_values(unrolled: str) -> list[LaidOutValue]:
    values = []
    for match in re.finditer(r"tpu\.roll_vectors ([^{]*)\{out_layout = \[([^\]]*)\]\} : [^\n]*-> "
                             r"vector<([^>]*)>", unrolled):
        layout = VectorLayout.parse(match.group(2))
        if layout is None:
            continue
        *dims, dtype = match.group(3).split("x")
        values.append(LaidOutValue(tuple(int(d) for d in dims), dtype, layout,
                                   vregs=match.group(1).count("%")))
    return values


# ------------------------------------------------------------------ the child process

def _serve(prepare: str | None = None) -> int:
    """The dumping compiler's side: one JSON request per line on stdin, one reply per line.
    `prepare`: a topology made before the first request (libtpu started with it)."""
    with quiet_libtpu_startup():
        import jax
        from jax import export
        from jax.experimental import topologies

        jax.config.update("jax_enable_compilation_cache", False)
    devices = {}
    if prepare:
        try:
            with quiet_libtpu_startup():
                devices[prepare] = topologies.get_topology_desc(topology_name=prepare, platform="tpu").devices
        except Exception:  # made again, and its error replied, when a request names it
            pass
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["topology"] not in devices:
                with quiet_libtpu_startup():
                    devices[request["topology"]] = topologies.get_topology_desc(
                        topology_name=request["topology"], platform="tpu").devices
            program = export.deserialize(bytearray(Path(request["program"]).read_bytes()))
            used = devices[request["topology"]][:program.nr_devices]
            if len(used) < program.nr_devices:
                raise ValueError(f"the program runs on {program.nr_devices} devices; topology "
                                 f"{request['topology']} has {len(used)}")
            call = _named(program.call, program.fun_name)
            if program.nr_devices == 1:
                sharding = jax.sharding.SingleDeviceSharding(used[0])
                placed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in program.in_avals]
                jitted = jax.jit(call)
            else:  # the exported shardings, over a mesh of the topology's devices shaped as the caller's
                import numpy as np

                if not request.get("mesh"):
                    raise ValueError(f"the program runs on {program.nr_devices} devices: give its arguments "
                                     f"NamedShardings over a mesh of {program.nr_devices} devices")
                axis_names, axis_sizes = request["mesh"]
                mesh = jax.sharding.Mesh(np.array(used).reshape(axis_sizes), tuple(axis_names))
                shardings = program.in_shardings_jax(mesh)
                placed = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s)
                          for a, s in zip(program.in_avals, shardings)]
                outputs = jax.tree.unflatten(program.out_tree, program.out_shardings_jax(mesh))
                jitted = jax.jit(call, in_shardings=shardings, out_shardings=outputs)
            start = time.perf_counter()
            compiled = jitted.trace(*placed).lower().compile()
            reply = {"ok": True, "hlo": compiled.as_text(), "seconds": time.perf_counter() - start,
                     "device_kind": used[0].device_kind, "devices": len(used), **_analyses(compiled)}
        except Exception as error:
            reply = {"ok": False, "error": str(error)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


def _analyses(compiled) -> dict:
    """XLA's bytes accessed and temp bytes of a compiled program (None where it gives none)."""
    analysis = compiled.cost_analysis()
    analysis = (analysis[0] if isinstance(analysis, (list, tuple)) and analysis else analysis) or {}
    memory = compiled.memory_analysis()
    return {"bytes_accessed": analysis.get("bytes accessed"),
            "temp_bytes": None if memory is None else int(memory.temp_size_in_bytes)}


def _named(function, name: str):
    """function under another name: the optimized HLO names its module and instructions after it."""
    def call(*args):
        return function(*args)

    call.__name__ = call.__qualname__ = name
    return call


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) <= 3:
        sys.exit(_serve(*sys.argv[2:]))
