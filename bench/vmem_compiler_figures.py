"""The VMEM a Pallas kernel needs: the course's model against the Mosaic compiler's own figure.

    python bench/vmem_compiler_figures.py             # the model's figure for every case
    python bench/vmem_compiler_figures.py --compile   # and the compiler's, where libtpu is installed
    python bench/vmem_compiler_figures.py --limits    # each chip's default scoped VMEM limit (libtpu)

`--compile` needs the tpu-compile extra (`pip install -e ".[tpu-compile]"`, libtpu 0.0.42.*,
what jax[tpu]==0.10.2 pins). It compiles each kernel ahead of time for a described TPU on
this CPU with `pytest_tpucourse.compiler.libtpu.compile_for`: nothing runs, nothing is timed.
Every case is sized above the chip's default scoped VMEM limit, so the compiler refuses it
with E1001 and prints the bytes it needed ("Scoped allocation with size 28.00M and limit
16.00M"), or, above the whole VMEM, "Used 24.00M of 16.00M vmem"; compile_for reads both
into TpuCompileError.vmem_needed_bytes and vmem_limit_bytes. `COMPILER` holds what libtpu
0.0.42.1 printed (2026-11-30); tests/test_vmem_footprint.py checks that
pytest_tpucourse.readers.vmem_footprint reproduces it.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pytest_tpucourse import chips
from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse.readers import vmem_footprint
from pytest_tpucourse.checking.compiler_figures import matmul_schedule as matmul

MiB = 2**20
LIMIT_CHIPS = ("v4", "v5e", "v5p", "v6e", "v7x")


def elementwise(block, *, single_buffer_x=False, constant_y=False):
    """o = x + y (a copy of x for int8, which Mosaic cannot add) over a grid of column blocks."""
    def call(x, y):
        rows, cols = x.shape
        spec = pl.BlockSpec(block, lambda i, j: (i, j))
        x_spec = pl.BlockSpec(block, lambda i, j: (i, j),
                              **(dict(pipeline_mode=pl.Buffered(1)) if single_buffer_x else {}))
        y_spec = pl.BlockSpec(block, lambda i, j: (0, 0)) if constant_y else spec
        body = ((lambda a, b, o: o.__setitem__(..., a[...])) if x.dtype == jnp.int8
                else (lambda a, b, o: o.__setitem__(..., a[...] + b[...])))
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(rows // block[0], cols // block[1]),
                              in_specs=[x_spec, y_spec], out_specs=spec)(x, y)
    return call


def operands(shapes, dtype):
    return [jax.ShapeDtypeStruct(s, jnp.dtype(dtype)) for s in shapes]


# (name, chip, kernel, operand shapes, dtype)
CASES = [
    ("matmul f32 2048^3, blocks 1024x1024x1024", "v5e", matmul(1024, 1024, 1024),
     [(2048, 2048)] * 2, "float32"),
    ("matmul f32 2048^3, blocks 512x1024x1024", "v5e", matmul(512, 1024, 1024), [(2048, 2048)] * 2,
     "float32"),
    ("add f32, blocks (8, 131072)", "v5e", elementwise((8, 131072)), [(8, 524288)] * 2, "float32"),
    ("add f32, blocks (8, 131072), x Buffered(1)", "v5e", elementwise((8, 131072), single_buffer_x=True),
     [(8, 524288)] * 2, "float32"),
    ("add f32, blocks (8, 131072), y's index constant", "v5e", elementwise((8, 131072), constant_y=True),
     [(8, 524288)] * 2, "float32"),
    ("add f32, blocks (1, 1048576)", "v5e", elementwise((1, 1048576)), [(1, 2097152)] * 2, "float32"),
    ("add f32, blocks (2, 1048576)", "v5e", elementwise((2, 1048576)), [(2, 4194304)] * 2, "float32"),
    ("add f32, blocks (3, 1048576)", "v5e", elementwise((3, 1048576)), [(3, 2097152)] * 2, "float32"),
    ("add f32, blocks (5, 524288)", "v5e", elementwise((5, 524288)), [(5, 2097152)] * 2, "float32"),
    ("add f32, blocks (6, 524288)", "v5e", elementwise((6, 524288)), [(6, 2097152)] * 2, "float32"),
    ("add f32, blocks (12, 131072)", "v5e", elementwise((12, 131072)), [(12, 524288)] * 2, "float32"),
    ("add bf16, blocks (1, 2097152)", "v5e", elementwise((1, 2097152)), [(1, 4194304)] * 2, "bfloat16"),
    ("add bf16, blocks (8, 262144)", "v5e", elementwise((8, 262144)), [(8, 524288)] * 2, "bfloat16"),
    ("add bf16, blocks (8, 262144) of 1024 rows", "v5e", elementwise((8, 262144)), [(1024, 524288)] * 2,
     "bfloat16"),
    ("add bf16, blocks (12, 524288)", "v5e", elementwise((12, 524288)), [(12, 1048576)] * 2, "bfloat16"),
    ("add bf16, blocks (16, 131072)", "v5e", elementwise((16, 131072)), [(16, 524288)] * 2, "bfloat16"),
    ("add bf16, blocks (24, 262144)", "v5e", elementwise((24, 262144)), [(24, 1048576)] * 2, "bfloat16"),
    ("copy int8, blocks (1, 4194304)", "v5e", elementwise((1, 4194304)), [(1, 8388608)] * 2, "int8"),
    ("copy int8, blocks (2, 4194304)", "v5e", elementwise((2, 4194304)), [(2, 8388608)] * 2, "int8"),
    ("copy int8, blocks (5, 1048576)", "v5e", elementwise((5, 1048576)), [(5, 2097152)] * 2, "int8"),
    ("copy int8, blocks (8, 1048576)", "v5e", elementwise((8, 1048576)), [(8, 2097152)] * 2, "int8"),
    ("copy int8, blocks (16, 524288)", "v5e", elementwise((16, 524288)), [(16, 2097152)] * 2, "int8"),
    ("copy int8, blocks (40, 262144)", "v5e", elementwise((40, 262144)), [(40, 1048576)] * 2, "int8"),
    ("add bf16, blocks (8, 524288)", "v6e", elementwise((8, 524288)), [(8, 1048576)] * 2, "bfloat16"),
    ("add bf16, blocks (1, 4194304)", "v6e", elementwise((1, 4194304)), [(1, 8388608)] * 2, "bfloat16"),
    ("add bf16, blocks (24, 524288)", "v6e", elementwise((24, 524288)), [(24, 1048576)] * 2, "bfloat16"),
    ("add f32, blocks (6, 1048576)", "v6e", elementwise((6, 1048576)), [(6, 4194304)] * 2, "float32"),
    ("add bf16, blocks (2, 2097152)", "v5e", elementwise((2, 2097152)), [(2, 4194304)] * 2, "bfloat16"),
    ("add bf16, blocks (3, 1048576)", "v5e", elementwise((3, 1048576)), [(3, 2097152)] * 2, "bfloat16"),
]

# What libtpu 0.0.42.1 printed for each case: (MiB needed, MiB scoped limit, or the whole
# VMEM where the case exceeds it: 127.94 on v6e). The
# last two (bf16 blocks of 2 and 3 rows) carry 0.04 MiB of the compiler's own on top.
COMPILER = {
    CASES[0][0]: (28.00, 16.00), CASES[1][0]: (18.00, 16.00), CASES[2][0]: (24.00, 16.00),
    CASES[3][0]: (20.00, 16.00), CASES[4][0]: (20.00, 16.00), CASES[5][0]: (24.00, 16.00),
    CASES[6][0]: (48.00, 16.00), CASES[7][0]: (96.00, 16.00), CASES[8][0]: (96.00, 16.00),
    CASES[9][0]: (96.00, 16.00), CASES[10][0]: (48.00, 16.00), CASES[11][0]: (48.00, 16.00),
    CASES[12][0]: (24.00, 16.00), CASES[13][0]: (24.00, 16.00), CASES[14][0]: (96.00, 16.00),
    CASES[15][0]: (24.00, 16.00), CASES[16][0]: (72.00, 16.00), CASES[17][0]: (96.00, 16.00),
    CASES[18][0]: (96.00, 16.00), CASES[19][0]: (48.00, 16.00), CASES[20][0]: (48.00, 16.00),
    CASES[21][0]: (48.00, 16.00), CASES[22][0]: (60.00, 16.00), CASES[23][0]: (48.00, 32.00),
    CASES[24][0]: (96.00, 32.00), CASES[25][0]: (144.00, 127.94), CASES[26][0]: (192.00, 127.94),
    CASES[27][0]: (48.04, 16.00), CASES[28][0]: (48.04, 16.00),
}
COMPILER_EXTRA_MIB = {CASES[27][0]: 0.04, CASES[28][0]: 0.04}  # the compiler's own scratch


def model_bytes(kernel, shapes, dtype) -> int:
    """The model's VMEM bytes for the kernel's one pallas_call (traced only, never run)."""
    (buffers,) = vmem_footprint.kernel_buffers(jax.make_jaxpr(kernel)(*operands(shapes, dtype)))
    return vmem_footprint.footprint_bytes(buffers)


def compiler_figure(kernel, shapes, dtype, chip) -> str:
    """What the real compiler says of the kernel for `chip`: the VMEM it needed against the limit."""
    try:
        libtpu.compile_for(kernel, *operands(shapes, dtype), chip=chips.get_chip(chip))
        return "compiles"
    except libtpu.TpuCompileError as error:  # the compiler's refusal is the measurement
        if error.kind == "vmem":
            return f"{error.vmem_needed_bytes / MiB:.2f}M (limit {error.vmem_limit_bytes / MiB:.2f}M, {error.code or 'no code'})"
        return error.message.splitlines()[0][:120]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="also compile each case with libtpu")
    parser.add_argument("--limits", action="store_true",
                        help="print the default scoped VMEM limit the compiler applies on each chip")
    args = parser.parse_args(argv)
    if (args.compile or args.limits) and not libtpu.available():
        sys.exit(libtpu.missing_line())
    if args.limits:
        # 48 MiB of blocks: above every default limit, and above v4's whole VMEM.
        probe = elementwise((8, 262144)), [(8, 1048576)] * 2, "float32"
        for chip in LIMIT_CHIPS:
            print(f"{chip}: {compiler_figure(*probe, chip)}", flush=True)
        raised = matmul(1024, 1024, 1024, vmem_limit_bytes=32 * MiB), [(2048, 2048)] * 2, "float32"
        print(f"v5e, the 28 MiB matmul with vmem_limit_bytes=32 MiB: {compiler_figure(*raised, 'v5e')}")
        return 0
    print(f"| case | chip | model | {'compiler (libtpu)' if args.compile else 'compiler, recorded'} |")
    print("|---|---|---|---|")
    for name, chip, kernel, shapes, dtype in CASES:
        model = model_bytes(kernel, shapes, dtype) / MiB
        needed, limit = COMPILER[name]
        seen = compiler_figure(kernel, shapes, dtype, chip) if args.compile else f"{needed:.2f}M (limit {limit:.2f}M)"
        print(f"| {name} | {chip} | {model:.2f}M | {seen} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
