"""Compiled graded calls: the program cache shared by graded code and the checker's oracles.

Graded code is first run as one jitted program: op by op, JAX compiles every
primitive of every distinct shape and dtype on its own, and a chapter of pure-JAX
exercises spent most of its first run doing that (docs/speed.md has the times
before and after). Code that cannot be traced (Python control flow
on values, NumPy calls on arrays) or that fails in any way is run again eagerly,
so the learner sees the error of their code as written, never a tracer's.
"""

from __future__ import annotations

import functools
import hashlib

from . import backend

_COMPILED: dict = {}


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


def compiled(function, kwargs, kind: str = "call"):
    """function(*args, **kwargs) ("call") or its VJP ("vjp") as one jitted program.

    "call" returns a callable of the positional args; "vjp" one of (args, cotangents)
    giving (outputs, grads). Keyword arguments that are arrays (masks) are traced;
    the others (block sizes, flags, scales) are compile-time, and the program is kept
    per (function, those values), so every call that binds the same ones shares one
    jit cache. Shared by the graded calls here and by the checker's oracles and floors.
    """
    import jax

    static = {k: v for k, v in kwargs.items() if not _is_array(v)}
    dynamic = {k: v for k, v in kwargs.items() if _is_array(v)}
    key = (function, tuple(sorted(static.items())), kind)
    try:
        program = _COMPILED.get(key)
    except TypeError:  # an unhashable setting: compile for this call alone
        key, program = None, None
    if program is None:
        if kind == "call":
            program = jax.jit(lambda *args, **traced: function(*args, **static, **traced))
        else:
            def vjp(args, cotangents, **traced):
                outputs, pullback = jax.vjp(lambda *a: function(*a, **static, **traced), *args)
                return outputs, pullback(cotangents)
            program = jax.jit(vjp)
        if key is not None:
            _COMPILED[key] = program
    return functools.partial(program, **dynamic) if dynamic else program


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def exact_call_key(function, args, kwargs):
    """The function and the exact argument values (array bytes hashed), or None if unhashable."""
    import jax
    import numpy as np

    try:
        leaves, tree = jax.tree.flatten((args, kwargs))
        values = tuple(
            (x.shape, str(x.dtype), hashlib.sha1(np.asarray(x).tobytes()).hexdigest())
            if hasattr(x, "shape") else repr(x)
            for x in leaves
        )
        return (id(function), tree, values)
    except Exception:
        return None
