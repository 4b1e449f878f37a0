"""`tpucourse xray module.py:function --shapes ...`: one function at three layers (jaxpr, StableHLO,
optimized HLO), linked op to op, in the terminal or as one web page (instruments/xray_page.py).

    tpucourse xray model.py:loss --shapes 8x128 128x10:bfloat16 [--html xray.html] [--chip v5e]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def add_parser(subcommands):
    x = subcommands.add_parser("xray", help="one function at three layers (jaxpr, StableHLO, optimized HLO), "
                               "linked op to op")
    x.add_argument("target", metavar="module.py:function")
    x.add_argument("--shapes", nargs="*", metavar="SHAPE", help="one per argument: 8x16, 8x16:bfloat16, scalar")
    x.add_argument("--html", metavar="FILE", help="write a self-contained page where hovering an op "
                   "highlights its counterparts")
    x.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    x.add_argument("--chip", help="take the optimized HLO from the real TPU compiler for this chip (v5e, v6e, "
                   "...: the tpu-compile extra) instead of this machine's XLA")
    return x


def run(args) -> int:
    from ..instruments import xray_page
    from ..run import registered_chips

    chip = getattr(args, "chip", None)
    if chip:
        from ..compiler import libtpu

        if not libtpu.available():
            raise ValueError(f"--chip {libtpu.missing_line()}")
        with libtpu.quiet_libtpu_startup():  # JAX's backends start, and libtpu with them
            import jax

            jax.devices()
    function = xray_page.load_function(args.target)
    shapes = xray_page.parse_shapes(args.shapes or [])
    title = f"{args.target}({', '.join(f'{s.dtype}{list(s.shape)}' for s in shapes)})"
    try:
        pic = xray_page.picture(function, shapes, re.sub(r"\s+", " ", title),
                                chip=registered_chips.named(chip) if chip else None)
    except Exception as error:  # the program's own error, or one XLA raises compiling it
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        where = f"for a {chip} with the real TPU compiler" if chip else "here"
        raise ValueError(f"{args.target} did not trace, lower and compile {where}: {type(error).__name__}: "
                         f"{first}") from None
    if args.html:
        Path(args.html).write_text(xray_page.page(pic), encoding="utf-8")
        print(f"wrote {args.html}: {len(pic.rows)} equations, {len(pic.ops)} StableHLO ops, "
              f"{len(pic.entry)} ENTRY instructions")
    else:
        sys.stdout.write(xray_page.terminal_text(pic, xray_page.wants_colour(args.color, sys.stdout)))
    return 0
