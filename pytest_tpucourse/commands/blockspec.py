"""`tpucourse blockspec`: the BlockSpec sandbox in a terminal (instruments/blockspec_sandbox.py).

    tpucourse blockspec --shape 1000x384 --block 128x128 --dtype bfloat16
"""

from __future__ import annotations


def add_parser(subcommands):
    k = subcommands.add_parser("blockspec", help="is a block legal for the TPU; its grid, ragged edges and VMEM")
    k.add_argument("--shape", required=True, help="the array, e.g. 1000x384")
    k.add_argument("--block", required=True, help="the block, e.g. 128x128 (None or _ squeezes a dimension)")
    k.add_argument("--dtype", default="float32")
    return k


def run(args) -> int:
    from ..compiler import libtpu
    from ..instruments.blockspec_sandbox import parse_block, sandbox

    shape = parse_block(args.shape)
    if None in shape:
        raise ValueError(f"an array shape takes sizes only, got {args.shape!r}")
    with libtpu.quiet_libtpu_startup():  # JAX's backends start, and libtpu with them
        import jax

        jax.devices()
    report = sandbox(shape, parse_block(args.block), args.dtype)
    print("\n".join(report.lines()))
    return 0
