"""What a graded function's traced program contains: kernels, ops outside them.

Values alone cannot tell a Pallas kernel from a call to the reference, nor a
fused kernel from a kernel followed by XLA ops; the jaxpr can.
"""

from __future__ import annotations

from .outcomes import WrongResult

# Primitives that move or relabel data without computing on it: a wrapper around
# one kernel may use these, and nothing else, outside the kernel.
LAYOUT_PRIMITIVES = frozenset({
    "pallas_call", "reshape", "broadcast_in_dim", "convert_element_type", "squeeze",
    "expand_dims", "copy", "copy_p", "pjit", "jit", "closed_call", "transpose",
})

CUSTOM_VJP_PRIMITIVES = frozenset({"custom_vjp_call", "custom_vjp_call_jaxpr"})


def pallas_call_eqns(closed_jaxpr) -> list:
    """The pallas_call equations a traced program runs (nested jaxprs included)."""
    return [eqn for eqn in _all_eqns(closed_jaxpr.jaxpr) if eqn.primitive.name == "pallas_call"]


def count_pallas_calls(closed_jaxpr) -> int:
    """How many pallas_calls a traced program runs (nested jaxprs included)."""
    return len(pallas_call_eqns(closed_jaxpr))


def primitives_outside_kernels(closed_jaxpr) -> list[str]:
    """Primitive names a traced program runs outside any pallas_call body."""
    return [eqn.primitive.name for eqn in _all_eqns(closed_jaxpr.jaxpr)]


def defines_custom_vjp(closed_jaxpr) -> bool:
    return any(eqn.primitive.name in CUSTOM_VJP_PRIMITIVES for eqn in _all_eqns(closed_jaxpr.jaxpr))


# Functions already seen to run a kernel, by (function, argument shapes, kwargs):
# a hypothesis test calls one function on a few shapes many times, and the trace
# costs about as much as one interpret-mode call of a small kernel.
_USES_PALLAS: set = set()


def assert_uses_pallas(fn, *args, **kwargs) -> None:
    """Anti-cheat: fail unless fn(*args, **kwargs) runs at least one pallas_call."""
    key = _call_key(fn, args, kwargs)
    if key is not None and key in _USES_PALLAS:
        return
    closed = fn.jaxpr(*args, **kwargs)
    if count_pallas_calls(closed) > 0:
        if key is not None:
            _USES_PALLAS.add(key)
        return
    ops = sorted(set(primitives_outside_kernels(closed)) - {"pjit", "jit"})
    raise WrongResult(
        f"{fn.display} contains no pallas_call: it computes the answer with "
        f"{', '.join(ops[:8]) or 'no ops'} instead of a Pallas kernel. The exercise is to "
        f"write the kernel; calling the reference or plain jnp does not count."
    )


def _call_key(fn, args, kwargs):
    import jax

    shapes = tuple((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a).__name__)))
                   for a in jax.tree.leaves(args))
    key = (fn.resolve(), shapes, tuple(sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:  # unhashable keyword arguments: no caching
        return None
    return key


def assert_one_kernel(fn, *args, **kwargs) -> None:
    """Fail unless fn(*args, **kwargs) runs exactly one pallas_call and no math outside it."""
    closed = fn.jaxpr(*args, **kwargs)
    count = count_pallas_calls(closed)
    outside = sorted(set(primitives_outside_kernels(closed)) - LAYOUT_PRIMITIVES)
    if count != 1 or outside:
        found = f"{count} pallas_call(s)" + (f" and {', '.join(outside)} outside them" if outside else "")
        raise WrongResult(
            f"{fn.display} must be one Pallas kernel with all of its arithmetic inside "
            f"(one HBM write of the result); its jaxpr has {found}."
        )


def large_values(closed_jaxpr, elements: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(primitive, shape, dtype) of every value the program computes, outside kernel bodies,
    with at least `elements` elements (a kernel's own outputs included: they live in HBM)."""
    found = []
    for eqn in _all_eqns(closed_jaxpr.jaxpr):
        for var in eqn.outvars:
            shape = tuple(getattr(var.aval, "shape", ()))
            if _size(shape) >= elements:
                found.append((eqn.primitive.name, shape, str(getattr(var.aval, "dtype", ""))))
    return found


def assert_no_value_as_large_as(fn, args, *, elements: int, what: str, why: str = "",
                                kwargs=None, repro: str = "") -> None:
    """Fail if fn's program holds, outside its kernels, any array of `elements` or more.

    For kernels whose point is an intermediate that never reaches HBM (flash attention's
    (Sq, Skv) scores): pass the intermediate's size as `elements` and pick shapes where
    every array the op legitimately holds (inputs, outputs, per-row statistics) is
    smaller. fn may be a derived function (a gradient), whose program holds the forward
    and the backward.
    """
    kwargs = kwargs or {}
    found = large_values(fn.jaxpr(*args, **kwargs), elements)
    if found:
        primitive, shape, dtype = found[0]
        raise WrongResult(
            f"{fn.display} computes a {dtype}{list(shape)} array ({_size(shape):,} elements, "
            f"from {primitive}) outside its Pallas kernels: at least as large as {what} "
            f"({elements:,} elements)." + (f" {why}" if why else "")
            + (f"\n  reproduce: {repro}" if repro else ""))


def _size(shape) -> int:
    size = 1
    for dim in shape:
        size *= int(dim)
    return size


def _all_eqns(jaxpr):
    """Every equation, descending into sub-jaxprs but not into pallas_call bodies."""
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "pallas_call":
            continue
        for sub in sub_jaxprs(eqn):
            yield from _all_eqns(sub)


def sub_jaxprs(eqn):
    """The open jaxprs an equation's parameters hold (branches, loop bodies, calls)."""
    for sub in closed_sub_jaxprs(eqn):
        yield sub.jaxpr


def closed_sub_jaxprs(eqn):
    """The same, closed: an open jaxpr comes with no constants."""
    from jax.extend import core as jex_core

    for param in eqn.params.values():
        for sub in param if isinstance(param, (list, tuple)) else (param,):
            if isinstance(sub, jex_core.ClosedJaxpr):
                yield sub
            elif isinstance(sub, jex_core.Jaxpr):
                yield jex_core.ClosedJaxpr(sub, ())
