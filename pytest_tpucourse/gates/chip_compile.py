"""A rehearsal's compile of the timed kernel for the chip, at the gate's full size.

A rehearsal on a CPU runs the measuring path at shapes a CPU can run (GateRun.shapes), where a
kernel's default blocks shrink to the arrays and its scoped VMEM is a fraction of the gate's. The
chip compiles the kernel at the timed shapes with its own blocks, and refuses what does not fit
there (E1001 CompileTimeScopedVmemOom) or what Mosaic cannot build. So the rehearsal compiles the
timed kernel at those shapes for the named chip with the real compiler (libtpu, ahead of time:
compiler/libtpu.py), whose results are kept by program in tpu-compiles/, and a refusal fails the
test with the compiler's words, the bytes asked and allowed, and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..chips import Chip


@dataclass(frozen=True)
class Compiled:
    """What the compile at the gate's size said: `refused` (the failure's text) or None, and a note
    for the rehearsal's summary."""

    refused: str | None
    note: str


def at_gate_size(fn, args, scaled: list[tuple], chip: Chip) -> Compiled:
    """Compile fn for `chip` at the gate's shapes: each array of `args` (built at the CPU's shapes)
    at the timed shape `scaled` pairs it with ((timed, cpu) pairs, as GateRun.shapes noted them)."""
    from ..compiler import libtpu

    structs, why_not = _timed_structs(args, scaled)
    if structs is None:
        return Compiled(None, f"not compiled for {chip.name}: {why_not}")
    if not libtpu.available():
        return Compiled(None, f"not compiled for {chip.name}: {libtpu.missing_line()}")
    import jax

    shown = " · ".join("x".join(map(str, s.shape)) for s in jax.tree.leaves(structs))
    try:
        compiled = libtpu.compile_for(fn, *structs, chip=chip)
    except libtpu.TpuCompileError as error:
        if error.kind == "timeout":  # no verdict: the compiler was stopped, not refusing
            return Compiled(None, f"not compiled for {chip.name} at {shown}: {error}")
        return Compiled(f"the timed kernel would not compile for a {chip.name} TPU at the gate's size ({shown}): "
                        f"{error}", "")
    except Exception as error:  # the learner's code, traced at the gate's size
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return Compiled(f"the timed kernel could not be traced at the gate's size ({shown}) for the compile: "
                        f"{type(error).__name__}: {text}", "")
    kept = ", kept from an earlier compile" if compiled.from_cache else ""
    return Compiled(None, f"compiled for {chip.name} at {shown} by libtpu, ahead of time: accepted{kept}")


def _timed_structs(args, scaled: list[tuple]):
    """(args as ShapeDtypeStructs at the timed shapes, None), or (None, why they cannot be known)."""
    import jax

    to_timed: dict[tuple, tuple] = {}
    for timed, cpu in scaled:
        for t, c in _shape_pairs(timed, cpu):
            if to_timed.setdefault(c, t) != t:
                return None, f"the CPU's shape {_dims(c)} stands for two timed shapes"
    leaves, tree = jax.tree.flatten(args)
    structs = []
    for leaf in leaves:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return None, "an input is not an array"
        shape = tuple(leaf.shape)
        if to_timed and shape not in to_timed:
            return None, f"the input of shape {_dims(shape)} is not one the gate scaled for the CPU"
        structs.append(jax.ShapeDtypeStruct(to_timed.get(shape, shape), leaf.dtype))
    return jax.tree.unflatten(tree, structs), None


def _shape_pairs(timed, cpu):
    """(timed shape, CPU shape) per array: `timed` and `cpu` are one shape or a list of shapes."""
    if timed and isinstance(timed[0], (list, tuple)):
        return [(tuple(t), tuple(c)) for t, c in zip(timed, cpu)]
    return [(tuple(timed), tuple(cpu))]


def _dims(shape) -> str:
    return "x".join(map(str, shape)) or "()"
