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
  exact(fn, args, expected=...)        a result compared as plain data (counts, text, tables)

Inputs are arrays, numbers, strings, tuples, lists and dicts, and two nodes the worker builds:
`built(builder, *args)` (a module-level function of the test file, called on plain arguments:
a program to trace, a jaxpr) and `mesh(n)` (a 1-D mesh of the run's first n devices, axis "x").
Importing this module loads no JAX.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["built", "Case", "Cases", "close", "exact", "grads", "mesh", "seed", "values"]

NAME = "TRUSTED"  # the name a graded test file gives its Cases


@dataclass(frozen=True)
class Values:
    reference: Any  # a references.Reference (bound keywords may hold nodes: a mesh)
    names: tuple[str, ...] | None = None
    tol: float | None = None


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


def values(function: str, args, *, reference, kwargs=None, names=None, tol=None, label: str = "") -> Case:
    return Case(function, tuple(args), dict(kwargs or {}), Values(reference, tuple(names) if names else None, tol),
                label)


def grads(function: str, args, *, reference, argnames, kwargs=None, cotangent_seed: int = 0, tol=None,
          label: str = "") -> Case:
    if len(argnames) != len(args):
        raise ValueError(f"argnames {argnames} must name each of the {len(args)} inputs (or None)")
    return Case(function, tuple(args), dict(kwargs or {}), Grads(reference, tuple(argnames), cotangent_seed, tol),
                label)


def exact(function: str, args, *, expected, kwargs=None, what: str = "the result", compare=None,
          label: str = "") -> Case:
    return Case(function, tuple(args), dict(kwargs or {}), Exact(expected, what, compare), label)


def built(builder: Callable, *args, label: str = "", **kwargs) -> Built:
    return Built(builder, tuple(args), dict(kwargs), label)


def mesh(devices: int, axis: str = "x") -> Mesh:
    return Mesh(devices, axis)


def close(rtol: float = 1e-6, atol: float = 0.0) -> Callable:
    """A compare for exact(): numbers anywhere in the result within rtol (relative) or atol,
    everything else equal."""
    def compare(got, expected):
        return _differs(got, expected, rtol, atol, "")
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
