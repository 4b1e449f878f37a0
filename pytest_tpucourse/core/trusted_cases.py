"""An exercise's trusted cases: the calls `tpucourse grade` checks outside the graded tree's process.

Each graded test file declares, beside its tests and from the same constants, the cases its
exercise is checked on when a result must be trusted (docs/grading.md, "The trusted check"):

    TRUSTED = checks.trusted.Cases(_trusted_cases)

    def _trusted_cases(rng):                      # a numpy Generator seeded from the grader's secret
        seed = checks.trusted.seed(rng)
        x = tst.random_array((128, 1024), "float32", seed)
        y = tst.random_array((1024, 256), "float32", seed + 1)
        return [checks.trusted.values("matmul", (x, y), kwargs=dict(bm=64, bk=256, bn=128),
                                      reference=references.MATMUL)]

The grader draws the cases in its own process, computes what each must return there (the
reference's float64 oracle and XLA floor, or `expected`), and sends a worker process that
imports the tree only the inputs (core/plain_data.py); the worker sends back plain results,
which the grader judges with the course's tolerance rule (core/tolerance.py). Nothing here runs
in the tree's process but the builders of inputs that are not plain data (`built`, `mesh`),
and the conversion of what the graded function returned to plain data.

Kinds of case:
  values(fn, args, reference=...)      every output against the oracle, within the tolerance rule
  grads(fn, args, reference=..., argnames=...)   the VJP for cotangents drawn by the grader
  exact(fn, args, expected=...)        a result compared as plain data (counts, text, tables), or
                                       with compare(got, expected) -> None or why not

An input that is a program's HLO text comes from `program_text`, which leaves out the frames
that traced it (they would make the draw depend on its caller).

Inputs are arrays, numbers, strings, tuples, lists and dicts, and two nodes the worker builds:
`built(builder, *args)` (a module-level function of the test file, called on plain arguments:
a program to trace, a jaxpr) and `mesh(n)` (a 1-D mesh of the run's first n devices, axis "x").
Importing this module loads no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["built", "Case", "Cases", "close", "exact", "grads", "judge_array", "mesh", "passes", "program_text", "seed",
           "SOLUTION", "values"]

NAME = "TRUSTED"  # the name a graded test file gives its Cases


class _Solution:
    def __repr__(self) -> str:
        return "checks.trusted.SOLUTION"


# exact(..., expected=SOLUTION): what the course's own solution (solutions/chNN/) returns for the
# same inputs, run in the grader's process: for answers no reference function computes (a
# schedule, a verdict, a table), judged with `compare` where more than one answer is right.
SOLUTION = _Solution()


@dataclass(frozen=True)
class Values:
    reference: Any  # a references.Reference (bound keywords may hold nodes: a mesh)
    names: tuple[str, ...] | None = None
    tol: float | None = None
    reference_args: tuple[int, ...] | None = None  # the positions of the args the reference takes (all)


@dataclass(frozen=True)
class Grads:
    reference: Any
    argnames: tuple[str | None, ...]
    cotangent_seed: int = 0
    tol: float | None = None


@dataclass(frozen=True)
class Exact:
    expected: Any  # a value, or a callable of the (built) args and kwargs run in the grader
    what: str = "the result"
    compare: Callable | None = None  # compare(got, expected) -> None or why they differ (plain data)


@dataclass(frozen=True)
class Case:
    """One call of the graded function and how its result is judged."""

    function: str  # the function in the exercise's module, or "module.function" of the chapter
    args: tuple
    kwargs: dict
    check: Values | Grads | Exact
    label: str = ""  # how a verdict names the call; by default written from the call
    # A module-level function of the test file the worker calls as through(graded, *args, **kwargs)
    # instead of graded(*args, **kwargs) (for grads: through(graded, args, cotangents, **kwargs)
    # instead of graded.vjp): for what a result alone does not show (what a callback saw), or
    # an argument only the tree can build (an object of its own module)
    through: Callable | None = None

    def describe(self) -> str:
        if self.label:
            return self.label
        shown = [describe_value(a) for a in self.args] + [f"{k}={describe_value(v)}" for k, v in self.kwargs.items()]
        what = "grads of " if isinstance(self.check, Grads) else ""
        return f"{what}{self.function}({', '.join(shown)})"


@dataclass(frozen=True)
class Built:
    """An input the worker builds with a module-level function of the test file."""

    builder: Callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""

    def describe(self) -> str:
        return self.label or f"{self.builder.__name__}({', '.join(map(describe_value, self.args))})"


@dataclass(frozen=True)
class Mesh:
    """A 1-D mesh of the run's first `devices` devices, along `axis`."""

    devices: int
    axis: str = "x"

    def describe(self) -> str:
        return f"mesh({self.devices})"


@dataclass(frozen=True)
class Cases:
    """An exercise's trusted cases: draw(rng) -> [Case], rng a numpy Generator."""

    draw: Callable


def seed(rng) -> int:
    """A seed for strategies.random_array, drawn from the grader's generator."""
    return int(rng.integers(0, 2**31 - 1))


def values(function: str, args, *, reference, kwargs=None, names=None, tol=None, label: str = "",
           reference_args=None, through: Callable | None = None) -> Case:
    """reference_args: the positions of the args the reference takes, where the graded function
    takes more (a program as well as its inputs)."""
    return Case(function, tuple(args), dict(kwargs or {}),
                Values(reference, tuple(names) if names else None, tol,
                       tuple(reference_args) if reference_args is not None else None), label, through)


def grads(function: str, args, *, reference, argnames, kwargs=None, cotangent_seed: int = 0, tol=None,
          label: str = "", through: Callable | None = None) -> Case:
    if len(argnames) != len(args):
        raise ValueError(f"argnames {argnames} must name each of the {len(args)} inputs (or None)")
    return Case(function, tuple(args), dict(kwargs or {}), Grads(reference, tuple(argnames), cotangent_seed, tol),
                label, through)


def exact(function: str, args, *, expected, kwargs=None, what: str = "the result", compare=None,
          label: str = "", through: Callable | None = None) -> Case:
    return Case(function, tuple(args), dict(kwargs or {}), Exact(expected, what, compare), label, through)


def built(builder: Callable, *args, label: str = "", **kwargs) -> Built:
    return Built(builder, tuple(args), dict(kwargs), label)


def mesh(devices: int, axis: str = "x") -> Mesh:
    return Mesh(devices, axis)


def program_text(function: Callable, *args, optimized: bool) -> str:
    """The HLO text of jit(function) on args (XLA's optimized module when `optimized`), for a case's
    input: traced with no Python frames in its locations, which name every caller's line, so the
    same seed draws the same text wherever the draw is made."""
    import jax

    limit = jax.config.jax_traceback_in_locations_limit
    jax.config.update("jax_traceback_in_locations_limit", 0)
    try:
        lowered = jax.jit(function).lower(*args)
        return lowered.compile().as_text() if optimized else lowered.as_text(dialect="hlo")
    finally:
        jax.config.update("jax_traceback_in_locations_limit", limit)


def close(rtol: float = 1e-6, atol: float = 0.0) -> Callable:
    """A compare for exact(): numbers anywhere in the result within rtol (relative) or atol,
    everything else equal."""
    def compare(got, expected):
        return _differs(got, expected, rtol, atol, "")
    return compare


def passes(check: Callable) -> Callable:
    """A compare for exact() from an assertion: check(got, expected) raising AssertionError (an
    assert, or a course checker's WrongResult) on a wrong answer; its message is the reason."""
    def compare(got, expected):
        try:
            check(got, expected)
        except AssertionError as error:
            return "\n".join(str(error).strip().splitlines()[:3]) or "the answer is wrong"
        return None
    return compare


def _differs(got, expected, rtol: float, atol: float, where: str) -> str | None:
    import math

    number = (int, float)
    if isinstance(expected, number) and not isinstance(expected, bool):
        if not isinstance(got, number) or isinstance(got, bool):
            return f"{where or 'the result'} is {got!r}; expected {expected!r}"
        if math.isnan(expected) and math.isnan(got):
            return None
        if not abs(got - expected) <= max(atol, rtol * abs(expected)):
            return f"{where or 'the result'} is {got!r}; expected {expected!r}"
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where or 'the result'} is {got!r}; expected {expected!r}"
        for key in expected:
            found = _differs(got[key], expected[key], rtol, atol, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return f"{where or 'the result'} is {got!r}; expected {expected!r}"
        for index, (g, e) in enumerate(zip(got, expected)):
            found = _differs(g, e, rtol, atol, f"{where}[{index}]")
            if found:
                return found
        return None
    return None if got == expected else f"{where or 'the result'} is {got!r}; expected {expected!r}"


def judge_array(got, oracle, floor, *, kind: str = "forward", tol=None, what: str = "the output",
                dtype: str | None = None) -> str | None:
    """None where `got` (an array, or Shards of one) passes the course's tolerance rule
    (core/tolerance.py) against the float64 `oracle`, the XLA `floor` setting its dtype (or
    `dtype`; without a floor the rule's base bound) and the error's scale; else what is wrong: its shape, its dtype, a non-finite
    value the oracle lacks, or the relative error above the bound."""
    import numpy as np

    from . import plain_data, tolerance

    want = np.dtype(floor.dtype) if dtype is None else plain_data.numpy_dtype(dtype)
    if isinstance(got, plain_data.Shards):
        if tuple(got.shape) != tuple(oracle.shape):
            return f"{what} has shape {tuple(got.shape)}, expected {tuple(oracle.shape)}"
        why = _not_covered(got, what)
        if why:
            return why
        for device, index, part in got.pieces:
            region = tuple(slice(a, b) for a, b in index)
            why = judge_array(part, oracle[region], None if floor is None else floor[region], kind=kind, tol=tol,
                              what=f"{what} on device {device}", dtype=want.name)
            if why:
                return why
        return None
    oracle = np.asarray(oracle, np.float64)
    if not isinstance(got, np.ndarray):
        return f"{what} should be an array of shape {tuple(oracle.shape)} and dtype {want.name}, got {_describe(got)}"
    if tuple(got.shape) != tuple(oracle.shape):
        return f"{what} has shape {tuple(got.shape)}, expected {tuple(oracle.shape)}"
    if got.dtype != want:
        return f"{what} has dtype {got.dtype.name}, expected {want.name}"
    if oracle.size == 0:
        return None
    if not _is_float(want):
        wrong = got != oracle.astype(want)
        if wrong.any():
            first = tuple(int(i) for i in np.argwhere(wrong)[0])
            return (f"{what} differs in {int(wrong.sum())} of {oracle.size} entries (first at {list(first)}: "
                    f"got {got[first]}, expected {oracle.astype(want)[first]})")
        return None
    got64 = got.astype(np.float64)
    reference = tolerance.rounded_reference(oracle, want)
    same = (np.isnan(got64) & np.isnan(reference)) | (got64 == reference)
    bad = (~np.isfinite(got64) & ~same) | (np.isfinite(got64) & ~np.isfinite(reference))
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        return (f"{what} is {got64[first]:g} at {list(first)} where the reference is {reference[first]:g} "
                f"({int(bad.sum()):,} such values)")
    error, bound, _ = tolerance.judge(got64, oracle, want, kind, None if floor is None else floor.astype(np.float64))
    if tol is not None:
        bound = tol
    if not error <= bound:
        finite = np.isfinite(reference)
        diff = np.abs(np.subtract(got64, reference, out=np.zeros_like(got64), where=finite))
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))
        return (f"{what} is wrong: relative error {error:.2e} > bound {bound:.2e}; worst element {list(worst)}: "
                f"got {got64[worst]:.6g}, expected {reference[worst]:.6g}")
    return None


def _not_covered(got, what: str) -> str | None:
    """Why the devices' parts of `got` (Shards) do not hold every element of its shape exactly once,
    or None. A part held whole by several devices (a replicated output) is one region. An answer
    is judged only on the values it carries: no parts, a part empty or outside the shape, two
    parts overlapping, or elements on no device are not an answer."""
    import math

    import numpy as np

    shape = tuple(got.shape)
    described = f"{what} (an array {list(shape)} over {len(got.pieces)} devices)"
    if not got.pieces:
        return f"{described} carries no values: no device holds any of it"
    if math.prod(shape) == 0:
        return None
    regions: dict = {}
    for device, index, _part in got.pieces:
        if len(index) != len(shape) or not all(0 <= a < b <= n for (a, b), n in zip(index, shape)):
            return (f"{described}: device {device} holds {_region(index)}, which is empty or outside the "
                    f"shape; an answer is judged only on the values it carries")
        regions.setdefault(tuple(index), device)
    held = np.zeros(shape, dtype=bool)
    for index, device in regions.items():
        region = tuple(slice(a, b) for a, b in index)
        if held[region].any():
            return (f"{described}: device {device} holds {_region(index)}, which overlaps another device's "
                    f"part; every element must be held once (or whole, by each device)")
        held[region] = True
    missing = held.size - int(np.count_nonzero(held))
    if missing:
        return (f"{described} leaves {missing:,} of its {held.size:,} elements on no device; an answer is "
                f"judged only on the values it carries")
    return None


def _region(index) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in index) + "]"


def _is_float(dtype) -> bool:
    return dtype.kind in "fc" or dtype.name == "bfloat16"


def _describe(value) -> str:
    from . import plain_data

    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array {value.dtype.name}{list(value.shape)}"
    if isinstance(value, plain_data.Shards):
        return f"an array {list(value.shape)} over {len(value.pieces)} devices"
    return f"a {type(value).__name__}"


def describe_value(value) -> str:
    """An input in a verdict's words: arrays by dtype and shape, nodes by their label."""
    if isinstance(value, (Built, Mesh)):
        return value.describe()
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{getattr(dtype, 'name', dtype)}{list(shape)}"
    if isinstance(value, (tuple, list)) and len(value) > 6:
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe_value(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class TrustedCasesError(Exception):
    """A test file's trusted cases that cannot be drawn or sent: a bug in the course, not the tree."""


def test_module(path, key: str):
    """The graded test file at `path` (of exercise `key`), imported by path under a name of its own
    (two chapters' test_softmax.py never collide): the same module in the grader and the worker."""
    import importlib.util
    import sys
    from pathlib import Path

    name = f"_tpucourse_trusted_{key.replace('.', '_')}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, Path(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load(path, key: str) -> Cases | None:
    """The exercise's Cases, declared as TRUSTED in its graded test file; None if it declares none."""
    declared = getattr(test_module(path, key), NAME, None)
    if declared is None:
        return None
    if not isinstance(declared, Cases):
        raise TrustedCasesError(f"{path}: {NAME} must be checks.trusted.Cases(draw), not {type(declared).__name__}")
    return declared
