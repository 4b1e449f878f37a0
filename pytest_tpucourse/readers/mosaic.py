"""The Mosaic module of a Pallas kernel, read on a CPU: lowered for a TPU, decoded to text.

`pl.pallas_call` lowers for a TPU to a StableHLO `custom_call @tpu_custom_call`
whose backend config carries the kernel as a Mosaic MLIR module in base64 bytecode
(the `body`), and the kernel's name in a `kernel_name` attribute. Nothing but the
lowering is needed to get it: no TPU, no libtpu. `kernels(fn, *args)` lowers the
call with interpret mode switched off, finds every such custom call and decodes
each body with JAX's own MLIR context and Mosaic's `mosaic-serde` pass (the
recipe of `jax._src.tpu_custom_call`), giving the module as it enters the Mosaic
compiler: before layout inference, so it has ops and memref types, no vector
layouts (those exist only inside the compiler: `tpu_compile`).

Its private JAX touch points (JAX's MLIR context, the Mosaic dialect's registration)
live in jax_internals.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
from dataclasses import dataclass

from ..chips import DEFAULT_CHIP, Chip, get_chip, jax_version_of


@dataclass(frozen=True)
class MosaicKernel:
    """One pallas_call of a lowered program, as the Mosaic compiler receives it."""

    name: str  # the pallas_call's kernel name (its `name=`, else the kernel function's)
    text: str  # the Mosaic module as MLIR text, pre-layout
    op_counts: dict  # operation name -> how many in the kernel function, as printed (MLIR's own walk)
    kernel_attributes: dict  # the kernel function's attributes, as MLIR prints each value


def lower_for_tpu(fn, *args, chip: Chip | None = None, **kwargs):
    """jax.jit(fn).lower(...) for a TPU, on any machine; Pallas' lowering errors propagate.

    Interpret mode would replace the Mosaic lowering, so it is off for the trace.
    Arguments are arrays or ShapeDtypeStructs; keyword arguments are static.
    """
    import jax

    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    with lowering_for(chip):
        return jax.jit(lambda *a: fn(*a, **kwargs)).trace(*shapes).lower(lowering_platforms=("tpu",))


@contextlib.contextmanager
def lowering_for(chip: Chip | None):
    """Interpret mode off, and Pallas' chip-dependent lowering rules aimed at `chip` (None, or a
    chip JAX has no version for: the course's default chip), for a trace that lowers for a TPU.

    Some lowering rules depend on the chip generation (integer `//` and `sign`, for one) and
    ask the local device, which on a CPU is no TPU: they lower for this chip instead.
    """
    from jax.experimental.pallas import tpu as pltpu

    from ..core import jax_internals

    version = (chip and jax_version_of(chip)) or jax_version_of(get_chip(DEFAULT_CHIP))
    with pltpu.force_tpu_interpret_mode(None), jax_internals.tpu_info_for_this_device(version):
        yield


def kernels(fn, *args, chip: Chip | None = None, **kwargs) -> list[MosaicKernel]:
    """Every pallas_call of fn(*args, **kwargs), lowered for a TPU, as Mosaic text, in program order."""
    return decode(lower_for_tpu(fn, *args, chip=chip, **kwargs))


def decode(lowered) -> list[MosaicKernel]:
    """The Mosaic kernels inside a lowered program (`jax.stages.Lowered`)."""
    return _decode_module(lowered.compiler_ir("stablehlo"))


def decode_text(stablehlo: str) -> list[MosaicKernel]:
    """The Mosaic kernels inside a program's StableHLO text (`jax.export.Exported.mlir_module()`)."""
    from jaxlib.mlir import ir

    from ..core import jax_internals

    with jax_internals.mlir_context():
        return _decode_module(ir.Module.parse(stablehlo))


def _decode_module(module) -> list[MosaicKernel]:
    from jaxlib.mlir import ir

    found = []
    for call in _tpu_custom_calls(module.operation):
        config = json.loads(ir.StringAttr(call.attributes["backend_config"]).value)
        name = (ir.StringAttr(call.attributes["kernel_name"]).value
                if "kernel_name" in call.attributes else f"kernel {len(found)}")
        found.append(decode_body(base64.b64decode(config["custom_call_config"]["body"]), name))
    return found


def decode_body(bytecode: bytes, name: str | None = None) -> MosaicKernel:
    """A tpu_custom_call body (Mosaic MLIR bytecode) as a MosaicKernel; name: its kernel function's
    name unless given."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.passmanager import PassManager

    from ..core import jax_internals

    context = jax_internals.mlir_context(with_tpu_dialect=True)
    with context, ir.Location.unknown():
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(bytecode)
        PassManager.parse("builtin.module(mosaic-serde{serialize=false})").run(module.operation)
        kernel = _kernel_function(module)
        attributes = {} if kernel is None else {key: str(kernel.attributes[key]) for key in kernel.attributes}
        return MosaicKernel(
            name=name or attributes.get("sym_name", '"?"').strip('"'),
            text=str(module),
            op_counts=dict(_count_ops(kernel)) if kernel is not None else {},
            kernel_attributes=attributes,
        )


def _tpu_custom_calls(operation):
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                if op.operation.name == "stablehlo.custom_call" and \
                        str(op.operation.attributes["call_target_name"]) == '"tpu_custom_call"':
                    yield op.operation
                yield from _tpu_custom_calls(op.operation)


def _count_ops(operation) -> collections.Counter:
    """Operations below `operation`, nested regions included, as the text shows them: the
    terminators MLIR leaves out of the printed form (`func.return`, printed `return`, and an
    `scf.yield` without operands) are not counted."""
    counts = collections.Counter()
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                name = op.operation.name
                if name != "func.return" and not (name == "scf.yield" and len(op.operation.operands) == 0):
                    counts[name] += 1
                counts.update(_count_ops(op.operation))
    return counts


def _kernel_function(module):
    """The kernel's func.func: the one with window_params or iteration_bounds (the others are its
    index maps), else the first."""
    functions = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    return next((f for f in functions if "window_params" in f.attributes or "iteration_bounds" in f.attributes),
                functions[0] if functions else None)
