"""A gate judges the learner's own kernel: what the traced program shows about whose work it is.

Values cannot tell the learner's kernel from JAX's shipped one (the ceiling itself), nor from
XLA's matmul with a token Pallas copy beside it; the gate-sized program can. A gate's kernel
(of each gate the table marks `times_own_kernel` in gates/criteria.py: gates 01, 03, 04 and 05;
their `correct` criterion and everything timed) must
  - run Pallas kernels whose bodies are defined in the graded tree: not in solutions/ (when
    the graded tree is another), pytest_tpucourse, or jax.experimental.pallas.ops. A kernel
    body's file is its function's code's (`co_filename`), which JAX keeps in the kernel
    jaxpr's debug info;
  - do the op's work in them: the dot_generals and convolutions outside every kernel may
    carry at most SMALL_SHARE of the op's FLOPs (so neither the XLA floor nor any XLA matmul
    does the work while a kernel stands by).
The exercises' own tests keep accepting public kernels as correct code (the graders'
equivalents rely on it); only the gates ask whose work it is.

FLOPs outside kernels are counted per program trace: a scan's body `length` times, a while
loop's once (its trip count is not known before it runs), a shard_map's body once (per
device, as the gates' costs are).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core import jax_internals
from ..core.outcomes import RAISED_BY_GRADED_CODE, Todo
from ..core.paths import shown
from ..readers import traced_program

SMALL_SHARE = 0.1  # of the op's FLOPs, at most, in dot_general / convolution outside the kernels

_SOURCE = re.compile(r"^(?P<name>.*) at (?P<file>.*):(?P<line>\d+)$")


@dataclass(frozen=True)
class Work:
    """One program a gate judges as the learner's: what it is, how to trace it, the op's FLOPs in it."""

    what: str
    trace: Callable[[], object]  # () -> ClosedJaxpr
    flops: float


def of_call(fn, args, kwargs=None, *, flops: float, what: str | None = None) -> Work:
    """fn(*args, **kwargs)'s program (fn: a graded function or any callable)."""
    import jax

    kwargs = dict(kwargs or {})
    return Work(what or _display(fn), lambda: jax.make_jaxpr(lambda *a: _raw(fn)(*a, **kwargs))(*args), flops)


def of_gradient(fn, args, kwargs=None, *, flops: float, what: str | None = None) -> Work:
    """The program of fn's forward and its VJP for a cotangent of ones (a training step's)."""
    import jax
    import jax.numpy as jnp

    kwargs = dict(kwargs or {})

    def step(*a):
        out, pullback = jax.vjp(lambda *x: _raw(fn)(*x, **kwargs), *a)
        return out, pullback(jax.tree.map(jnp.ones_like, out))

    return Work(f"the gradient of {what or _display(fn)}", lambda: jax.make_jaxpr(step)(*args), flops)


def problems(work: Work, tree_root: Path, course_root: Path | None = None) -> list[str]:
    """What shows that `work` is not the graded tree's own kernel doing the op (empty: it is)."""
    try:
        closed = work.trace()
    except RAISED_BY_GRADED_CODE as error:  # the learner's code, traced at the gate's size (a skip too)
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        stub = _stub_in(error, tree_root)
        if stub is not None:
            raise Todo(f"TODO: {work.what} is not written yet: {_shown(stub, course_root)} raises "
                       f"NotImplementedError ({text})") from None
        return [f"{work.what} could not be traced at the gate's size: {type(error).__name__}: {text}"]
    kernels = traced_program.pallas_call_eqns(closed)
    if not kernels:
        return [f"{work.what} runs no Pallas kernel"]
    found = []
    foreign = {}
    for eqn in kernels:
        name, file = kernel_origin(eqn)
        if file is None or not _inside(file, tree_root):
            foreign.setdefault(_shown(file, course_root) if file else "an unknown file", set()).add(name)
    if foreign:
        where = "; ".join(f"{', '.join(sorted(names))} in {file}" for file, names in sorted(foreign.items()))
        found.append(f"{work.what} runs Pallas kernels defined outside the graded tree "
                     f"{_shown(tree_root, course_root)}/ ({where}): the gate times your own kernel")
    outside = flops_outside_kernels(closed.jaxpr)
    if work.flops > 0 and outside > SMALL_SHARE * work.flops:
        found.append(f"{work.what} computes {outside:.3g} FLOPs in dot_general/convolution outside its Pallas "
                     f"kernels, {outside / work.flops:.0%} of the op's {work.flops:.3g} (at most "
                     f"{SMALL_SHARE:.0%} may be): XLA, not your kernel, does the op's work")
    return found


def _stub_in(error: BaseException, tree_root: Path) -> Path | None:
    """The graded tree's file that raised `error`, where it is a stub's NotImplementedError (raised
    in the tree's own code, as a graded function's stub is TODO); else None."""
    import traceback

    if not isinstance(error, NotImplementedError):
        return None
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    raised = Path(frames[-1].filename)
    return raised if _inside(raised, tree_root) else None


def find(works, tree_root: Path, course_root: Path | None = None) -> list[str]:
    return [problem for work in works for problem in problems(work, tree_root, course_root)]


def kernel_origin(eqn) -> tuple[str, Path | None]:
    """(kernel name, the file its body function is defined in) of a pallas_call equation."""
    debug = getattr(jax_internals.kernel_jaxpr(eqn), "debug_info", None)
    source = getattr(debug, "func_src_info", None) or ""
    match = _SOURCE.match(source)
    if match is None:
        return (jax_internals.equation_params(eqn).get("name") or "a kernel"), None
    file = match["file"]
    return match["name"], (Path(file) if not file.startswith("<") else None)


def flops_outside_kernels(jaxpr, times: float = 1.0) -> float:
    """FLOPs of the dot_generals and convolutions a program runs outside its pallas_call bodies."""
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "pallas_call":
            continue
        if name == "dot_general":
            total += times * _dot_flops(eqn)
        elif name == "conv_general_dilated":
            total += times * _conv_flops(eqn)
        inner = times * (jax_internals.equation_params(eqn).get("length", 1) if name == "scan" else 1)
        for sub in traced_program.sub_jaxprs(eqn):
            total += flops_outside_kernels(sub, inner)
    return total


def _dot_flops(eqn) -> float:
    (contract, _), _ = jax_internals.equation_params(eqn)["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    out = eqn.outvars[0].aval.shape
    return 2.0 * math.prod(out) * math.prod(lhs[d] for d in contract)


def _conv_flops(eqn) -> float:
    rhs = eqn.invars[1].aval.shape
    out = eqn.outvars[0].aval.shape
    numbers = jax_internals.equation_params(eqn).get("dimension_numbers")
    out_features = rhs[numbers.rhs_spec[0]] if numbers is not None else rhs[0]
    return 2.0 * math.prod(out) * math.prod(rhs) / max(out_features, 1)


def _raw(fn):
    """The function itself: a graded function resolved (imported) only when traced."""
    return fn.resolve() if hasattr(fn, "resolve") else fn


def _display(fn) -> str:
    display = getattr(fn, "display", None)
    if isinstance(display, str) and display:
        return display
    return f"{getattr(fn, '__name__', type(fn).__name__)}()"


def _inside(path: Path, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(root).resolve())


def _shown(path: Path, root: Path | None) -> str:
    """The path relative to the course, or from site-packages/ for an installed package's file."""
    text = shown(path, root)
    marker = "site-packages/"
    return text[text.index(marker) + len(marker):] if marker in text else text
