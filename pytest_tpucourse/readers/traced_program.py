"""What a graded function's traced program contains: kernels, ops outside them.

Values alone cannot tell a Pallas kernel from a call to the reference, nor a
fused kernel from a kernel followed by XLA ops; the jaxpr can.
"""

from __future__ import annotations

from ..core import jax_internals
from ..core.outcomes import WrongResult
from .call_keys import call_key

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


def kernel_grids(closed_jaxpr) -> list[tuple[int, ...]]:
    """The grid of each pallas_call a traced program runs, in program order."""
    return [jax_internals.kernel_grid(eqn).grid for eqn in pallas_call_eqns(closed_jaxpr)]


def assert_grid_steps(fn, args, *, extents: dict[str, int], kwargs=None, why: str = "",
                      note: str = "") -> None:
    """Fail unless fn's kernels walk exactly as many grid steps as the schedule's `extents` multiply to.

    `extents` names each axis of the schedule the exercise teaches by how it is derived from
    the shapes and blocks ({"M/bm": 2, "N/bn": 2, "K/bk": 4}): one step per block of work.
    A kernel that ignores a block size (all of K in one step) gives right values on every
    shape its VMEM holds; its grid shows it. Steps are counted over every pallas_call fn
    runs and are blind to the grid's order and to axes merged or split, which are the
    kernel author's to choose.
    """
    from .reproduction import of_program_check

    kwargs = kwargs or {}
    suffix = of_program_check(fn, args, kwargs, note)
    grids = kernel_grids(fn.jaxpr(*args, **kwargs))
    steps = sum(_size(grid) for grid in grids)
    expected = _size(extents.values())
    if steps != expected:
        ran = " and ".join(f"({', '.join(map(str, grid))})" for grid in grids) or "no grid"
        raise WrongResult(
            f"{fn.display} walks {steps} grid step{'s' * (steps != 1)} (a grid of {ran}); the "
            f"schedule walks {' · '.join(f'({name})' for name in extents)} = "
            f"{' · '.join(map(str, extents.values()))} = {expected}, one step per block."
            + (f" {why}" if why else "") + suffix)


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
    closed = fn.program_jaxpr(*args, **kwargs)  # the trace the call itself then reuses
    if count_pallas_calls(closed) > 0:
        if key is not None:
            seen.add(key)
        return
    ops = sorted(set(primitives_outside_kernels(closed)) - {"pjit", "jit"})
    raise WrongResult(
        f"{fn.display} contains no pallas_call: it computes the answer with "
        f"{', '.join(ops[:8]) or 'no ops'} instead of a Pallas kernel. The exercise is to "
        f"write the kernel; calling the reference or plain jnp does not count.",
        inputs_matter=False)


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


def assert_backward_is_pallas(fn, *args, **kwargs) -> None:
    """fn defines a jax.custom_vjp whose VJP runs pallas_calls beyond the forward's: its
    gradient is Pallas kernels of its own, not JAX's autodiff of the forward."""
    import jax

    forward = fn.jaxpr(*args, **kwargs)
    if not defines_custom_vjp(forward):
        raise WrongResult(f"{fn.display} defines no jax.custom_vjp: its gradient would be JAX's "
                          f"autodiff of the forward kernel, not a backward of its own.")
    function = fn.resolve()
    vjp = fn.context.deadline.call(lambda: jax.make_jaxpr(lambda *a: jax.vjp(
        lambda *x: function(*x, **kwargs), *a[:-1])[1](a[-1]))(*args, args[0]))
    if count_pallas_calls(vjp) <= count_pallas_calls(forward):
        raise WrongResult(f"{fn.display}: its VJP runs no pallas_call beyond the forward's; the "
                          f"backward must be Pallas kernels.")


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
                                kwargs=None, note: str = "") -> None:
    """Fail if fn's program holds, outside its kernels, any array of `elements` or more.

    For kernels whose point is an intermediate that never reaches HBM (flash attention's
    (Sq, Skv) scores): pass the intermediate's size as `elements` and pick shapes where
    every array the op legitimately holds (inputs, outputs, per-row statistics) is
    smaller. fn may be a derived function (a gradient), whose program holds the forward
    and the backward.
    """
    from .reproduction import of_program_check

    kwargs = kwargs or {}
    suffix = of_program_check(fn, args, kwargs, note)
    found = large_values(fn.jaxpr(*args, **kwargs), elements)
    if found:
        primitive, shape, dtype = found[0]
        raise WrongResult(
            f"{fn.display} computes a {dtype}{list(shape)} array ({_size(shape):,} elements, "
            f"from {primitive}) outside its Pallas kernels: at least as large as {what} "
            f"({elements:,} elements)." + (f" {why}" if why else "")
            + suffix)


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


def unread_outputs(closed_jaxpr) -> dict[int, frozenset[int]]:
    """For each pallas_call (by id of its equation), the positions of its outputs that the jaxpr
    it runs in neither reads nor returns: results nothing ever sees (a kernel's working state kept
    in an output, as jax 0.10.2's splash attention keeps its running max and sum). An output a
    nested jaxpr returns counts as read."""
    found = {}

    def walk(jaxpr):
        read = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                found[id(eqn)] = frozenset(i for i, v in enumerate(eqn.outvars) if id(v) not in read)
                continue
            for sub in sub_jaxprs(eqn):
                walk(sub)

    walk(closed_jaxpr.jaxpr)
    return found


def sub_jaxprs(eqn):
    """The open jaxprs an equation's parameters hold (branches, loop bodies, calls)."""
    for sub in closed_sub_jaxprs(eqn):
        yield sub.jaxpr


def closed_sub_jaxprs(eqn):
    """The same, closed: an open jaxpr comes with no constants."""
    from jax.extend import core as jex_core

    for param in jax_internals.equation_params(eqn).values():
        for sub in param if isinstance(param, (list, tuple)) else (param,):
            if isinstance(sub, jex_core.ClosedJaxpr):
                yield sub
            elif isinstance(sub, jex_core.Jaxpr):
                yield jex_core.ClosedJaxpr(sub, ())


# ---------------------------------------------------------------- distributed kernels
#
# Values cannot tell a kernel that moves data by remote DMA from one that lets XLA's
# collectives do it, nor a kernel that hides its copies behind compute from one that
# waits first and computes after; the kernel bodies can.

COLLECTIVE_PRIMITIVES = frozenset({
    "psum", "psum2", "psum_invariant", "pmax", "pmin", "pbroadcast", "ppermute", "pshuffle",
    "all_gather", "all_gather_invariant", "reduce_scatter", "all_to_all", "ragged_all_to_all",
})


def kernel_eqns(pallas_eqn):
    """Every equation of a pallas_call's kernel body, in program order, sub-jaxprs included
    (a loop body once, each branch of a cond in turn)."""
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield eqn
            for sub in sub_jaxprs(eqn):
                yield from walk(sub)
    yield from walk(jax_internals.kernel_jaxpr(pallas_eqn))


def is_remote_dma_start(eqn) -> bool:
    """A dma_start with a destination device: a copy to another chip."""
    if eqn.primitive.name != "dma_start":
        return False
    operands = jax_internals.dma_start_operands(eqn)
    return operands[-1] is not None  # the device id comes last; None for a local copy


def assert_communicates_by_remote_dma(fn, *args, **kwargs) -> None:
    """Anti-cheat for distributed kernels: the devices exchange data only through remote DMAs
    that the kernels start, after a barrier handshake; no XLA collective runs outside them."""
    closed = fn.jaxpr(*args, **kwargs)
    collectives = sorted(set(primitives_outside_kernels(closed)) & COLLECTIVE_PRIMITIVES)
    if collectives:
        raise WrongResult(
            f"{fn.display} lets XLA move the data ({', '.join(collectives)} outside the kernels): the "
            f"exercise is to move it yourself, with remote DMAs started inside the Pallas kernel.")
    kernels = pallas_call_eqns(closed)
    bodies = [(eqn, list(kernel_eqns(eqn))) for eqn in kernels]
    remote = [(eqn, body) for eqn, body in bodies if any(is_remote_dma_start(e) for e in body)]
    if not remote:
        raise WrongResult(
            f"{fn.display} starts no remote DMA in its {len(kernels)} pallas_call(s): the devices must "
            f"exchange data with pltpu.make_async_remote_copy(..., device_id=...).start().")
    for eqn, body in remote:
        if has_default_device_barrier(eqn):
            continue  # Pallas synchronises the devices at the kernel's entry itself
        first_copy = next(i for i, e in enumerate(body) if is_remote_dma_start(e))
        before = [e.primitive.name for e in body[:first_copy]]
        signals_out = any(e.primitive.name == "semaphore_signal" and _signals_another_device(e)
                          for e in body[:first_copy])
        if "get_barrier_semaphore" not in before or not signals_out or "semaphore_wait" not in before:
            raise WrongResult(
                f"{fn.display} starts a remote DMA before any barrier handshake, in a kernel that "
                f"{_why_no_default_barrier(eqn)}: first signal the barrier semaphore "
                f"(pltpu.get_barrier_semaphore()) of the device that will write into you, then wait "
                f"on yours; or leave collective_id unset and let Pallas insert its default device "
                f"barrier. On a TPU a copy into a device that has not entered the kernel lands in "
                f"buffers still owned by its previous program; TPU interpret mode shows it, when it "
                f"does, as a KeyError naming a buffer not allocated yet.")


def has_default_device_barrier(pallas_eqn) -> bool:
    """Whether Pallas synchronises every device at this kernel's entry by itself.

    A kernel given no barrier semaphore of its own (no collective_id) gets a device barrier
    at its start (JAX's distributed Pallas guide: "By default, if you do not specify a
    barrier semaphore, Pallas will automatically insert a barrier semaphore at the beginning
    of your program"; TPU interpret mode runs a global barrier there), unless
    CompilerParams(skip_device_barrier=True) turns it off.
    """
    params = _mosaic_params(pallas_eqn)
    return (getattr(params, "collective_id", None) is None
            and not getattr(params, "skip_device_barrier", False))


def _why_no_default_barrier(pallas_eqn) -> str:
    params = _mosaic_params(pallas_eqn)
    if getattr(params, "skip_device_barrier", False):
        return "turns off Pallas' default device barrier (skip_device_barrier=True)"
    return (f"names its own barrier (collective_id={params.collective_id}), so Pallas inserts no "
            f"default one")


def vmem_limits_asked(closed_jaxpr) -> dict[str, int | None]:
    """kernel name -> the scoped-VMEM limit its pallas_call asks the compiler for
    (`pltpu.CompilerParams(vmem_limit_bytes=...)`), None where it asks for none."""
    return {jax_internals.kernel_name(eqn): getattr(_mosaic_params(eqn), "vmem_limit_bytes", None)
            for eqn in pallas_call_eqns(closed_jaxpr)}


def _mosaic_params(pallas_eqn):
    return jax_internals.mosaic_compiler_params(pallas_eqn)


def _signals_another_device(eqn) -> bool:
    operands = jax_internals.semaphore_signal_operands(eqn)
    return len(operands) > 3 and operands[3] is not None  # (sem, transforms, inc, device_id, core)


def assert_compute_overlaps_communication(fn, *args, compute=("dot_general",), **kwargs) -> None:
    """Communication hidden behind compute: in some kernel, a `compute` op runs between the start
    of a remote DMA and the next DMA wait (in program order)."""
    closed = fn.jaxpr(*args, **kwargs)
    for eqn in pallas_call_eqns(closed):
        in_flight = False
        for e in kernel_eqns(eqn):
            if is_remote_dma_start(e):
                in_flight = True
            elif e.primitive.name == "dma_wait":
                in_flight = False
            elif in_flight and e.primitive.name in compute:
                return
    raise WrongResult(
        f"{fn.display} never computes while a copy is in flight: every {' / '.join(compute)} comes "
        f"after the wait of the copy started before it. Start the next chunk's copy, compute on the "
        f"chunk in hand, then wait: that is what hides the communication.")
