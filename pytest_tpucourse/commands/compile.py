"""`tpucourse compile FILE:FUNCTION`: a kernel through the real TPU compiler, and what it made of it.

    tpucourse compile exercises/ch11/matmul.py:matmul --chip v5e --shape 1024x1024,1024x1024 \\
        --dtype bfloat16 --kw bm=256 --kw bk=256 --kw bn=256

Prints, per kernel: the scoped VMEM its windows and scratch take against the
limit, the vector layouts Mosaic chose for its values (and how many vregs each
value takes), and the bundles and MXU instructions of its code. All of it is
static compiler output (libtpu, ahead of time, no TPU): nothing runs, nothing is
timed, and none of it is a speed.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from .. import chips
from ..compiler import libtpu
from ..run import registered_chips


def add_parser(subcommands):
    c = subcommands.add_parser("compile", help="compile a kernel for a TPU chip with the real compiler "
                            "(libtpu, no TPU needed): VMEM, layouts, bundles")
    c.add_argument("target", metavar="FILE:FUNCTION", help="e.g. exercises/ch11/matmul.py:matmul")
    c.add_argument("--chip", default=chips.DEFAULT_CHIP, help=", ".join(chips.TPU_CHIPS) + ", or one a plugin "
                   "registers with a compile_topology")
    c.add_argument("--shape", required=True, help="the arguments' shapes, comma-separated: 1024x1024,1024x1024")
    c.add_argument("--dtype", default="float32", help="one dtype for all arguments, or one per argument")
    c.add_argument("--kw", action="append", default=[], metavar="NAME=VALUE",
                   help="a keyword argument (repeatable): --kw bm=256 --kw causal=True")
    return c


def run(args) -> int:
    if not libtpu.available():
        print(f"tpucourse compile {libtpu.missing_line()}", file=sys.stderr)
        return 2
    chip = registered_chips.named(args.chip)  # built in, or registered by a plugin or conftest here
    with libtpu.quiet_libtpu_startup():  # JAX's backends start, and libtpu with them
        import jax

        jax.devices()
    function = load_function(args.target)
    shapes = [tuple(int(d) for d in part.split("x")) for part in args.shape.split(",")]
    dtypes = args.dtype.split(",")
    if len(dtypes) == 1:
        dtypes = dtypes * len(shapes)
    if len(dtypes) != len(shapes):
        raise ValueError(f"{len(shapes)} shapes but {len(dtypes)} dtypes")
    structs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes)]
    kwargs = dict(_keyword(item) for item in args.kw)
    call = (f"{args.target}({', '.join(f'{d}[{_dims(s)}]' for s, d in zip(shapes, dtypes))}"
            + "".join(f", {k}={v!r}" for k, v in kwargs.items()) + ")")
    print(f"{call} for {chip.name} (topology {chip.compile_topology or '?'})")
    import jax

    print(f"static compiler output of libtpu {libtpu.libtpu_version()} with jax {jax.__version__}, ahead of time: "
          "nothing ran and nothing was timed")
    try:
        compiled = libtpu.compile_for(function, *structs, chip=chip, dumps=True, **kwargs)
    except libtpu.TpuCompileError as error:
        print(f"\nthe compiler refuses it: {error}")
        return 1
    except Exception as error:  # the function itself failed while JAX traced it
        print(f"\n{args.target} raised while it was traced: {type(error).__name__}: {error}")
        return 1
    for kernel in compiled.kernels:
        print()
        print("\n".join(kernel_report(kernel, chip)))
    print(f"\ncompiled in {compiled.compile_seconds:.2f} s")
    return 0


def kernel_report(kernel: libtpu.KernelOnTpu, chip: chips.Chip) -> list[str]:
    grid = re.search(r"iteration_bounds = array<i64: ([\d, ]+)>", kernel.mosaic_layouts)
    steps = grid.group(1).replace(", ", "x") if grid else "none"
    lines = [f"kernel {kernel.name} (grid {steps})"]
    limit = chip.scoped_vmem_bytes
    if kernel.scoped_vmem_bytes is not None:
        against = (f" of the {_mib(limit)} default scoped-VMEM limit" if limit
                   else " (no scoped limit measured for this chip)")
        lines.append(f"  VMEM: {_mib(kernel.scoped_vmem_bytes)} for its windows (all buffers) and scratch"
                     f"{against}")
        for allocation in kernel.vmem_allocations:
            padding = f", {allocation.padding:,} of them padding" if allocation.padding else ""
            if allocation.what == "SPILL":  # the report's tag for it, with no shape
                lines.append(f"    register spills: {allocation.bytes:,} bytes: vector values live at once that do "
                             f"not fit in the vector registers, stored to VMEM and loaded back (smaller blocks, "
                             f"or fewer values live at a time, avoid them)")
                continue
            lines.append(f"    {allocation.what} ({allocation.shape}): {allocation.bytes:,} bytes{padding}")
    lines.append(f"  bundles: {kernel.bundles} in the kernel, {kernel.step_bundles} in one grid step "
                 f"(static code, branches included: not a time)")
    units = ", ".join(f"{u} {n}" for u, n in sorted(kernel.mxu_ops_by_unit.items()))
    lines.append(f"  MXU: {kernel.step_mxu_ops} vmatmul per grid step" + (f" ({units})" if units else ""))
    lines.append("  vector values, as Mosaic laid them out (bits, offsets, tile) -> vregs each:")
    seen = Counter((v.shape, v.dtype, v.layout, v.vregs) for v in kernel.values)
    for (shape, dtype, layout, vregs), count in sorted(seen.items(), key=lambda item: -item[0][3]):
        offsets = ",".join("*" if o is None else str(o) for o in layout.offsets)
        text = f"{layout.bitwidth},{{{offsets}}},({','.join(map(str, layout.tiling))})"
        if layout.implicit_dim:
            text += f",{layout.implicit_dim}"
        lines.append(f"    {f'vector<{_dims(shape)}x{dtype}>':<26} {text:<22} {vregs:>5} vregs"
                     + (f"  ({count} values)" if count > 1 else ""))
    return lines


def load_function(target: str):
    """FILE:FUNCTION -> the function; a file in a course tree's chNN/ is imported as its chapter's
    package, so `from . import other` works as in the graded tests."""
    path_text, _, name = target.rpartition(":")
    if not path_text or not name:
        raise ValueError(f"expected FILE:FUNCTION, got {target!r}")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise ValueError(f"{path_text} is not a file")
    from ..grading.tree import import_file

    module = import_file(path)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{path_text} has no function {name}()")
    return function


def _keyword(item: str):
    name, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"--kw takes NAME=VALUE, got {item!r}")
    for convert in (int, float):
        try:
            return name, convert(value)
        except ValueError:
            pass
    return name, {"True": True, "False": False, "None": None}.get(value, value)


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape)


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB"
