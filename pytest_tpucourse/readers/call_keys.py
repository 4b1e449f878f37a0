"""Keys for calls: one hashable key per (function, arguments), as every per-call cache of a run
uses it (compiled programs, the kernels a call is known to run, VMEM verdicts).

Arrays are keyed by shape and dtype (a trace sees only those), compile-time values by value.
"""

from __future__ import annotations

import hashlib


def call_key(function, args=(), kwargs=None, *, exact: bool = False):
    """One hashable key for a call of `function`, or None where the call cannot be keyed.

    Keyword arguments are compile-time values (block sizes, flags, and masks that a trace
    closes over), so they are keyed by value. Positional arrays are traced, so they are
    keyed by shape and dtype, or by value too with exact=True (the very call that hung
    before). Other values by repr; the function by identity.
    """
    import jax

    try:
        arg_leaves, arg_tree = jax.tree.flatten(tuple(args))
        kwarg_leaves, kwarg_tree = jax.tree.flatten(dict(kwargs or {}))
        key = (function, arg_tree, tuple(_leaf_key(x, exact) for x in arg_leaves),
               kwarg_tree, tuple(_leaf_key(x, True) for x in kwarg_leaves))
        hash(key)
    except Exception:
        return None
    return key


def _leaf_key(leaf, by_value: bool):
    if not is_array(leaf):
        return repr(leaf)
    if not by_value:
        return tuple(leaf.shape), str(leaf.dtype)
    import numpy as np

    return tuple(leaf.shape), str(leaf.dtype), hashlib.sha1(np.asarray(leaf).tobytes()).hexdigest()


def is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")
