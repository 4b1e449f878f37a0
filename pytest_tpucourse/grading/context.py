"""What every graded call of one run shares: its deadline, VMEM budget, chips and caches.

The session builds one GradingContext from the options and activates it for the run; the
`impl` fixture hands it to the functions it grades, and a function wrapped elsewhere
(`checks.graded`) finds the active one. Outside a pytest run (a benchmark script) the
defaults hold: a 60 s deadline, no VMEM check, the built-in chips, lowering and compiling
for the default chip. Activations nest, so a pytest run started inside another (pytester
in-process) restores the outer run's context when it ends.

A graded test names a chip as it likes ("v5e", a Chip): `resolve_chip` turns the name into
the run's Chip once, at the toolkit's public functions, seeing the chips plugins registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..chips import DEFAULT_CHIP, Chip, ChipRegistry, get_chip
from .compiled import CompiledPrograms
from .deadline import Deadline
from .vmem import VmemBudget


@dataclass(eq=False)
class GradingContext:
    deadline: Deadline = field(default_factory=Deadline)
    vmem: VmemBudget = field(default_factory=VmemBudget)
    # The TPU the kernel checks target off a TPU (the Mosaic lowering, the real compiler, its
    # figures): the run's chip where it is a TPU; None: the course's default chip.
    chip: Chip | None = None
    registry: ChipRegistry | None = None  # the chips this run knows; None: the built-in ones
    programs: CompiledPrograms = field(default_factory=CompiledPrograms)
    # Calls (call_keys.call_key) already seen to run a pallas_call: a hypothesis test calls one
    # function on a few shapes many times, and the trace costs about as much as one
    # interpret-mode call of a small kernel.
    kernel_calls: set = field(default_factory=set)
    # The latest call of each graded function (by display), for the reproduction line of a
    # check that fails (reproduction.py).
    calls: dict = field(default_factory=dict)
    # The sha256 of the bytes each graded module was imported from (its resolved path as text):
    # what the state file and gate rows record, whatever the file holds later.
    imported: dict = field(default_factory=dict)
    # The bytes themselves ({resolved path: bytes}): what the graded code was compiled from
    # (solution_code.py tells a module's own code from code executed into it).
    imported_sources: dict = field(default_factory=dict)
    # The graded tree's files each graded module's import and calls ran ({resolved module path:
    # {file: sha256}}, unit_files.py), the graded modules the current test used (resolved paths),
    # and those each exercise's tests used ({exercise key: set of paths}): an exercise's unit.
    units: dict = field(default_factory=dict)
    touched: set = field(default_factory=set)
    exercise_modules: dict = field(default_factory=dict)
    # The shipped solution files the learner's tree opened (solution_reads.SolutionReads), in a
    # run that grades exercises/; None otherwise.
    solution_reads: object = None
    # What the walk of solution_code.py found for each graded function object in the current
    # test ({(id(function), module path): (function, Provenance)}), emptied as each test starts:
    # within one test the graded modules are not imported again, and what they read is asked of
    # solution_reads at every call. The walk follows thousands of objects, and a test resolves
    # its function at every call: once a test instead of about five times.
    provenances: dict = field(default_factory=dict)
    # Kernels run natively on a TPU in this process, where the checks only TPU interpret mode can
    # make run elsewhere (placement.py); the node ids of the tests whose interpret-only part runs in
    # the host-CPU process.
    native_tpu: bool = False
    interpret_elsewhere: frozenset = frozenset()
    # The run is a learner's answered by the warm process, which lives on after it: a compile of
    # seconds may finish after the answer, its verdict read by the next run (tpu_rules, answer_later).
    in_warm_process: bool = False
    # In a warm process on a CPU: the last run's calls of the same arguments, compiled ahead on a
    # thread of their own (ahead.py); None elsewhere.
    ahead: object = None

    def unit_of(self, module_paths) -> dict[str, str]:
        """{file: sha256} of every file these graded modules' imports and calls ran."""
        found = {}
        for path in module_paths:
            found.update(self.units.get(str(path), {}))
        return dict(sorted(found.items()))

    def add_to_unit(self, module_path: str, files: dict[str, str]) -> None:
        unit = self.units.setdefault(module_path, {})
        for path, digest in files.items():
            unit.setdefault(path, digest)

    def kernel_chip(self) -> Chip:
        """The TPU the kernel checks target: the run's, or the course's default."""
        return self.chip or get_chip(DEFAULT_CHIP)

    def chip_named(self, chip: Chip | str | None) -> Chip:
        """A chip as a graded test names it: a Chip as it is, a name this run knows (built in or
        registered; ValueError otherwise), None the TPU the kernel checks target."""
        if chip is None:
            return self.kernel_chip()
        if isinstance(chip, Chip):
            return chip
        return (self.registry or ChipRegistry()).get(chip)


_active: list[GradingContext] = []
_outside_a_run = GradingContext()


def activate(context: GradingContext) -> None:
    _active.append(context)


def deactivate(context: GradingContext) -> None:
    if context in _active:
        _active.remove(context)


def runs_in_progress() -> int:
    """How many runs are active in this process (2: a pytester run inside another)."""
    return len(_active)


def active() -> GradingContext:
    """The context of the innermost run in progress, or the defaults outside any."""
    return _active[-1] if _active else _outside_a_run


def resolve_chip(chip: Chip | str | None) -> Chip:
    """`chip` as the innermost run in progress knows it (GradingContext.chip_named)."""
    return active().chip_named(chip)


GRADED_PRECISION = "highest"


def graded_precision(*trees):
    """The matmul precision a graded call, and its floor, run at: `jax.default_matmul_precision("highest")`
    where kernels run natively on a TPU and every float input is float32; JAX's default otherwise.

    At JAX's default a TPU computes an f32 product in one bf16 pass, Mosaic and XLA alike: an f32
    matmul is off by 2.3e-3 relative, an f32 attention by 3.3e-3 (v5e, bench/tpu/precision.json),
    over two hundred times the course's f32 margin and larger than what an f32 bug adds. At
    "highest" (six passes) the same products agree with float64 to about 1e-7, and the setting
    reaches inside a Pallas kernel's `jnp.dot` too. bf16 (and mixed) inputs keep the default: their
    products are exact in one pass, and Mosaic refuses a bf16 dot asked for at HIGHEST ("Bad lhs
    type", seen on a v5e). A no-op off a native TPU (a CPU computes f32 in f32). docs/checking.md,
    "Precision".
    """
    import contextlib

    import jax

    if active().native_tpu and float32_bound(*trees):
        return jax.default_matmul_precision(GRADED_PRECISION)
    return contextlib.nullcontext()


def float32_bound(*trees) -> bool:
    """Whether a call of these arguments is graded to a float32 bound: it has float inputs and all
    are float32 (on a TPU it runs at GRADED_PRECISION; chip_products.py holds products to it)."""
    import jax
    import jax.numpy as jnp

    floats = [leaf for leaf in jax.tree.leaves(trees)
              if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)]
    return bool(floats) and all(jnp.dtype(leaf.dtype) == jnp.float32 for leaf in floats)
