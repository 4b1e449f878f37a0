"""What a graded function's traced program contains: kernels, ops outside them.

Values alone cannot tell a Pallas kernel from a call to the reference, nor a
fused kernel from a kernel followed by XLA ops; the jaxpr can.
"""

from __future__ import annotations

from .grading.compiled import call_key
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


def assert_uses_pallas(fn, *args, **kwargs) -> None:
    """Anti-cheat: fail unless fn(*args, **kwargs) runs at least one pallas_call.

    A call seen to run one is remembered for the run (fn.context.kernel_calls).
    """
    seen = fn.context.kernel_calls
    key = call_key(fn.resolve(), args, kwargs)
    if key is not None and key in seen:
        return
    closed = fn.jaxpr(*args, **kwargs)
    if count_pallas_calls(closed) > 0:
        if key is not None:
            seen.add(key)
        return
    ops = sorted(set(primitives_outside_kernels(closed)) - {"pjit", "jit"})
    raise WrongResult(
        f"{fn.display} contains no pallas_call: it computes the answer with "
        f"{', '.join(ops[:8]) or 'no ops'} instead of a Pallas kernel. The exercise is to "
        f"write the kernel; calling the reference or plain jnp does not count."
    )


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
    from jax.extend import core as jex_core

    for param in eqn.params.values():
        for sub in param if isinstance(param, (list, tuple)) else (param,):
            if isinstance(sub, jex_core.ClosedJaxpr):
                yield sub.jaxpr
            elif isinstance(sub, jex_core.Jaxpr):
                yield sub
