"""Refuse a kernel whose VMEM scratch cannot fit the chip, before anything is allocated.

A Pallas kernel asks for scratch with `scratch_shapes=[pltpu.VMEM(shape, dtype)]`.
On a TPU the compiler rejects what does not fit; TPU interpret mode would instead
try to allocate it in host memory (filled with NaN), and a request of a few
hundred GiB takes the machine down. So before a graded call runs, its program is
traced (no execution, no allocation), the VMEM scratch of each pallas_call is
summed, and a call that asks for more than one TensorCore's VMEM fails at once.
Each function and argument signature is traced once.
"""

from __future__ import annotations

import warnings

from .. import structure

DEFAULT_CHIP = "v5e"

_budget: tuple[str, int] | None = None  # (chip name, VMEM bytes per TensorCore)
_checked: set = set()


class ScratchTooLarge(Exception):
    def __init__(self, requested: int, chip: str, capacity: int):
        self.requested, self.chip, self.capacity = requested, chip, capacity
        super().__init__(
            f"asks for {_size(requested)} of VMEM scratch; a {chip} TensorCore has {_size(capacity)} "
            f"(scratch_shapes=[pltpu.VMEM(...)] must fit in VMEM, with room left for the blocks)")


def configure(chip: str | None, vmem_bytes: int | None) -> None:
    """The chip whose VMEM bounds scratch; None turns the check off."""
    global _budget
    _budget = (chip, int(vmem_bytes)) if chip and vmem_bytes else None
    _checked.clear()


def check(function, args, kwargs) -> None:
    """Raise ScratchTooLarge if a pallas_call in function(*args, **kwargs) over-asks."""
    if _budget is None:
        return
    import jax

    key = call_signature(function, args, kwargs)
    if key is not None and key in _checked:
        return
    try:
        with warnings.catch_warnings():  # the real call shows its own warnings
            warnings.simplefilter("ignore")
            closed = jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*args)
    except Exception:
        return  # the real call reports it, charged to the code under grading
    requested = max((scratch_bytes(eqn) for eqn in structure.pallas_call_eqns(closed)), default=0)
    chip, capacity = _budget
    if requested > capacity:
        raise ScratchTooLarge(requested, chip, capacity)
    if key is not None:
        _checked.add(key)


def scratch_bytes(eqn) -> int:
    """Bytes of VMEM scratch one pallas_call equation asks for."""
    import numpy as np

    count = eqn.params["grid_mapping"].num_scratch_operands
    kernel = eqn.params["jaxpr"]
    total = 0
    for var in kernel.invars[len(kernel.invars) - count:] if count else ():
        aval = var.aval
        if str(getattr(aval, "memory_space", "")).lower() != "vmem":
            continue
        inner = getattr(aval, "inner_aval", aval)
        total += int(np.prod(inner.shape, dtype=object)) * np.dtype(inner.dtype).itemsize
    return total


def call_signature(function, args, kwargs):
    """A hashable key for (function, argument shapes and dtypes, other arguments), or None."""
    import jax

    try:
        leaves, tree = jax.tree.flatten(args)
        avals = tuple((x.shape, str(x.dtype)) if hasattr(x, "shape") else repr(x) for x in leaves)
        return (id(function), tree, avals, repr(sorted(kwargs.items())))
    except Exception:
        return None


def _size(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"
