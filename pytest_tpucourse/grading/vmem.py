"""Refuse a kernel whose VMEM scratch cannot fit the chip, before anything is allocated.

A Pallas kernel asks for scratch with `scratch_shapes=[pltpu.VMEM(shape, dtype)]`.
On a TPU the compiler rejects what does not fit; TPU interpret mode would instead
try to allocate it in host memory (filled with NaN), and a request of a few
hundred GiB takes the machine down. So before a graded call runs, its program is
traced (no execution, no allocation), the VMEM scratch of each pallas_call is
summed, and a call that asks for more than one TensorCore's VMEM fails at once.
Each function and argument signature is checked once, on the program the call compiles where
it has one (grading/calls.py), so the learner's code is not traced a second time for it.
"""

from __future__ import annotations

import warnings

from ..chips import Chip
from ..core import jax_internals
from ..readers import traced_program
from ..readers.call_keys import call_key


class ScratchTooLarge(Exception):
    def __init__(self, requested: int, chip: Chip, capacity: int):
        self.requested, self.chip, self.capacity = requested, chip, capacity
        super().__init__(
            f"asks for {_size(requested)} of VMEM scratch; a {chip.name} TensorCore has {_size(capacity)} "
            f"(scratch_shapes=[pltpu.VMEM(...)] must fit in VMEM, with room left for the blocks)")


class VmemBudget:
    """The VMEM one TensorCore of `chip` has; no chip, or one without a VMEM figure, turns the check off."""

    def __init__(self, chip: Chip | None = None):
        self.chip = chip
        self.capacity = int(chip.vmem_bytes) if chip is not None and chip.vmem_bytes else None
        self._checked: set = set()  # calls (by call_key) already seen to fit

    def check(self, function, args, kwargs, closed=None):
        """Raise ScratchTooLarge if a pallas_call in function(*args, **kwargs) over-asks. closed: the
        call's program, traced already (its jaxpr), or None to trace it here. Returns the program it
        read, or None where it read none (no VMEM figure, seen before, or it does not trace)."""
        if self.capacity is None:
            return None
        import jax

        key = call_key(function, args, kwargs)
        if key is not None and key in self._checked:
            return None
        if closed is None:
            try:
                with warnings.catch_warnings():  # the real call shows its own warnings
                    warnings.simplefilter("ignore")
                    closed = jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*args)
            except Exception:
                return None  # the real call reports it, charged to the code under grading
        requested = max((scratch_bytes(eqn) for eqn in traced_program.pallas_call_eqns(closed)), default=0)
        if requested > self.capacity:
            raise ScratchTooLarge(requested, self.chip, self.capacity)
        if key is not None:
            self._checked.add(key)
        return closed


def scratch_bytes(eqn) -> int:
    """Bytes of VMEM scratch one pallas_call equation asks for."""
    import numpy as np

    return sum(int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
               for shape, dtype, space in jax_internals.scratch_avals(eqn) if space == "vmem")


def _size(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}".replace(".0 ", " ")
    return f"{n} bytes"
