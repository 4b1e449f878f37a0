"""`tpucourse compile FILE:FUNCTION`: a kernel through the real TPU compiler, and what it made of it.

    tpucourse compile exercises/ch11/matmul.py:matmul --chip v5e --shape 1024x1024,1024x1024 \\
        --dtype bfloat16 --kw bm=256 --kw bk=256 --kw bn=256
    tpucourse compile exercises/ch14/collective_matmul.py:all_gather_matmul --mesh 4 --split 0,1 \\
        --shape 1024x512,512x65536 --dtype bfloat16

A kernel that takes a mesh (chapter 14's) is compiled over N chips of the chip's topology with
`--mesh N`: the function gets `mesh=`, a 1-D mesh of N devices whose axis is `--mesh-axis` ("x"), and
each argument is split over it along the dimension `--split` gives (`-`, the default: replicated), as
the graded tests shard them.

Prints, per kernel: the scoped VMEM its windows and scratch take against the
limit, the vector layouts Mosaic chose for its values (and how many vregs each
value takes), and the bundles and MXU instructions of its code. All of it is
static compiler output (libtpu, ahead of time, no TPU): nothing runs, nothing is
timed, and none of it is a speed.
"""

from __future__ import annotations

import math
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
    c.add_argument("--mesh", type=int, metavar="N", help="for a kernel that takes mesh=: compile it over N chips, "
                   "passing a 1-D mesh of N devices as mesh=")
    c.add_argument("--mesh-axis", default="x", metavar="NAME", help="with --mesh: the mesh axis's name (default x)")
    c.add_argument("--split", metavar="DIMS", help="with --mesh: per argument, the dimension split over the mesh "
                   "axis, comma-separated, - for replicated (default: all replicated), e.g. 0,1")
    return c


def run(args) -> int:
    if not libtpu.available():
        print(f"tpucourse compile {libtpu.missing_line()}", file=sys.stderr)
        return 2
    chip = registered_chips.named(args.chip)  # built in, or registered by a plugin or conftest here
    if args.mesh is not None and args.mesh < 1:
        raise ValueError(f"--mesh takes a number of devices, got {args.mesh}")
    if args.split is not None and args.mesh is None:
        raise ValueError("--split says how arguments are split over a mesh: give --mesh N too")
    chips_there = topology_chips(chip.compile_topology)
    if args.mesh and chips_there is not None and args.mesh > chips_there:
        raise ValueError(f"--mesh {args.mesh}: the {chip.name} compile topology ({chip.compile_topology}) has "
                         f"{chips_there} chips")
    with libtpu.quiet_libtpu_startup():  # JAX's backends start, and libtpu with them
        import jax

        from ..core import jax_internals

        if args.mesh and not jax_internals.backends_started():  # the mesh is made of this host's devices:
            jax.config.update("jax_num_cpu_devices", args.mesh)  # as many simulated CPUs, where none are yet
        jax.devices()
    function = load_function(args.target)
    shapes = [tuple(int(d) for d in part.split("x")) for part in args.shape.split(",")]
    dtypes = args.dtype.split(",")
    if len(dtypes) == 1:
        dtypes = dtypes * len(shapes)
    if len(dtypes) != len(shapes):
        raise ValueError(f"{len(shapes)} shapes but {len(dtypes)} dtypes")
    kwargs = dict(_keyword(item) for item in args.kw)
    if args.mesh:
        mesh = device_mesh(args.mesh, args.mesh_axis)
        structs = [jax.ShapeDtypeStruct(s, d, sharding=jax.NamedSharding(mesh, spec))
                   for s, d, spec in zip(shapes, dtypes, partition_specs(args.split, shapes, args.mesh_axis))]
        kwargs["mesh"] = mesh
    else:
        structs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes)]
    call = (f"{args.target}({', '.join(f'{d}[{_dims(s)}]' for s, d in zip(shapes, dtypes))}"
            + "".join(f", {k}={v!r}" for k, v in kwargs.items() if k != "mesh")
            + (f", mesh=<{args.mesh} devices, axis {args.mesh_axis!r}>" if args.mesh else "") + ")")
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
        wants_mesh = not args.mesh and isinstance(error, TypeError) and "'mesh'" in str(error)
        print(f"\n{args.target} raised while it was traced: {type(error).__name__}: {error}"
              + ("\n(it takes a mesh: compile it over N chips with --mesh N, and --split to say how each "
                 "argument is split over them)" if wants_mesh else ""))
        return 1
    asked = vmem_limits_asked(function, structs, kwargs)
    for kernel in compiled.kernels:
        print()
        print("\n".join(kernel_report(kernel, chip, asked.get(kernel.name))))
    chips_used = f" over {compiled.devices} {chip.name} chips" if compiled.devices > 1 else ""
    print(f"\ncompiled in {compiled.compile_seconds:.2f} s{chips_used}")
    return 0


def vmem_limits_asked(function, structs, kwargs) -> dict[str, int | None]:
    """kernel name -> the scoped-VMEM limit its pallas_call asks for (None: the chip's default),
    read off the traced program; {} where it cannot be read (the compile said what it could)."""
    import jax

    from ..readers.traced_program import vmem_limits_asked as asked_in

    try:
        return asked_in(jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*structs))
    except Exception:
        return {}


def kernel_report(kernel: libtpu.KernelOnTpu, chip: chips.Chip, asked: int | None = None) -> list[str]:
    """What the compiler made of one kernel. asked: the scoped-VMEM limit the kernel asked for
    (vmem_limit_bytes), which the compiler held it to instead of the chip's default."""
    grid = re.search(r"iteration_bounds = array<i64: ([\d, ]+)>", kernel.mosaic_layouts)
    steps = grid.group(1).replace(", ", "x") if grid else "none"
    lines = [f"kernel {kernel.name} (grid {steps})"]
    limit = chip.scoped_vmem_bytes
    if kernel.scoped_vmem_bytes is not None:
        if asked is not None:
            against = (f" of the {_mib(asked)} scoped-VMEM limit it asks for (vmem_limit_bytes; the "
                       f"{chip.name} default is {_mib(limit) if limit else 'not measured'})")
        else:
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


def topology_chips(topology: str | None) -> int | None:
    """How many chips a compile topology ("v5e:2x2", "v4:2x2x1") has; None where it does not say."""
    dims = (topology or "").partition(":")[2].split("x")
    return math.prod(int(d) for d in dims) if all(d.isdigit() for d in dims) else None


def device_mesh(devices: int, axis: str):
    """A 1-D mesh of this host's first `devices` devices (compile_for compiles the program over as
    many of the chip's)."""
    import jax

    available = jax.devices()
    if devices > len(available):
        raise ValueError(f"--mesh {devices}: this host has {len(available)} {available[0].platform} device(s)")
    return jax.make_mesh((devices,), (axis,), devices=available[:devices],
                         axis_types=(jax.sharding.AxisType.Auto,))


def partition_specs(split: str | None, shapes: list[tuple], axis: str) -> list:
    """Each argument's PartitionSpec: split along the dimension `split` names for it over `axis`,
    or replicated ("-", or no --split)."""
    import jax

    parts = split.split(",") if split else ["-"] * len(shapes)
    if len(parts) != len(shapes):
        raise ValueError(f"--split names {len(parts)} arguments, --shape {len(shapes)}")
    specs = []
    for part, shape in zip(parts, shapes):
        if part.strip() in ("-", ""):
            specs.append(jax.P())
            continue
        dim = int(part)
        if not 0 <= dim < len(shape):
            raise ValueError(f"--split {dim}: an argument of shape {_dims(shape)} has no dimension {dim}")
        specs.append(jax.P(*([None] * dim), axis))
    return specs


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
