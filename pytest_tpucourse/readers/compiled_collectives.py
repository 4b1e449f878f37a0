"""What a multi-device program sends between devices, read from its compiled HLO.

A ring collective written with `lax.ppermute` gives the same values as `lax.psum`;
only the compiled program shows which one ran. XLA keeps each collective as one
HLO instruction (`collective-permute`, `all-reduce`, `all-gather`, `reduce-scatter`,
`all-to-all`, or their `-start` halves), so a graded ring can be required to use
collective-permutes only, each moving no more than one chunk.

The HLO is compiled for the run's own devices (the simulated CPU devices off an
accelerator). Its text changes with the device count, so checks read instructions,
never compare whole texts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..core.outcomes import WrongResult

COLLECTIVES = ("collective-permute", "all-reduce", "all-gather", "reduce-scatter", "all-to-all")
BUILT_IN = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")

# "%name = f32[2,16]{1,0} collective-permute(...)" or the async "-start" form.
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(?P<shape>.*?)\s(?P<op>" + "|".join(COLLECTIVES)
    + r")(?:-start)?\(", re.MULTILINE)
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


@dataclass(frozen=True)
class Collective:
    op: str
    shape: str  # as HLO prints the result ("f32[2,16]{1,0}")

    @property
    def elements(self) -> int:
        """Elements of the result's largest array (a -start's tuple holds operand and result)."""
        arrays = _ARRAY.findall(self.shape)
        return max((math.prod(int(d) for d in dims.split(",") if d) for _, dims in arrays), default=0)


def compiled_collectives(fn, *args, **kwargs) -> list[Collective]:
    """The collectives in the compiled HLO of fn(*args, **kwargs), in program order."""
    return collectives_in(compiled_hlo(fn, *args, **kwargs))


def collectives_in(hlo_text: str) -> list[Collective]:
    return [Collective(m.group("op"), m.group("shape").strip()) for m in _INSTRUCTION.finditer(hlo_text)]


def compiled_hlo(fn, *args, **kwargs) -> str:
    """Optimised HLO of a graded function, compiled for this run's devices; failures are the function's.

    It is the program a graded call with the same arguments runs (the run's compiled programs),
    so a test that already called fn with them pays no second compile.
    """
    fn.jaxpr(*args, **kwargs)  # a stub or a tracing error is reported as such, first
    function = fn.resolve()
    with fn._guarded():
        return fn.context.programs.get(function, kwargs, "call").lower(*args).compile().as_text()


def assert_ring_collectives(fn, *args, max_elements: int | None = None, note: str = "",
                            **kwargs) -> None:
    """fn must communicate through collective-permutes only, each moving at most max_elements.

    Fails when the compiled program holds none (no communication at all, or values computed
    some other way), when it holds a built-in collective (all-reduce, all-gather,
    reduce-scatter, all-to-all: the answer in one instruction), or when a collective-permute
    moves more than one chunk (max_elements).
    """
    from .reproduction import remember, reproduction

    remember(fn, "call", args, kwargs)
    suffix = reproduction(fn, note=note)
    found = compiled_collectives(fn, *args, **kwargs)
    built_in = sorted({c.op for c in found if c.op in BUILT_IN})
    if built_in:
        raise WrongResult(
            f"{fn.display} compiles to {', '.join(built_in)}: XLA's own collective does the work. "
            f"The exercise is to build it from lax.ppermute (collective-permute), hop by hop.{suffix}")
    permutes = [c for c in found if c.op == "collective-permute"]
    if not permutes:
        raise WrongResult(
            f"{fn.display} compiles to no collective-permute: nothing travels between devices. "
            f"Each device holds only its own shard inside jax.shard_map; the other shards reach "
            f"it through lax.ppermute.{suffix}")
    if max_elements is not None:
        largest = max(permutes, key=lambda c: c.elements)
        if largest.elements > max_elements:
            raise WrongResult(
                f"{fn.display} sends {largest.elements} elements in one collective-permute "
                f"({largest.shape}); a ring step moves one chunk, at most {max_elements} elements "
                f"here: cut each shard into one chunk per device, and pass chunks, not shards.{suffix}")
