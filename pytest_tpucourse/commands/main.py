"""The `tpucourse` command: the learner's loop, the roofline playground and the BlockSpec sandbox in a terminal, the bench page.

    tpucourse roofline --chip v5e --op matmul --shape 4096x4096x4096 --dtype bfloat16
    tpucourse roofline --chip v5e --plot roofline.png      # needs the `plot` extra
    tpucourse mesh --chip v5e --topology 4x4 --op all-gather --bytes 1GiB   # a collective, hop by hop
    tpucourse bench                                        # bench/records.jsonl -> bench/README.md
    tpucourse records check [--repair]                     # bad lines and rejected rows, path:line
    tpucourse records link https://github.com/...          # gate 05's upstream link, self-reported
    tpucourse blockspec --shape 1000x384 --block 128x128 --dtype bfloat16   # the BlockSpec sandbox
    tpucourse timeline exchange-deadlock --devices 4       # a schedule's semaphore timeline
    tpucourse progress | hint ch11.matmul | solution ch11.matmul | reset ch11.matmul | watch ch11
    tpucourse tick ch15 3                                                    # a self-test item, your word
    tpucourse xray model.py:loss --shapes 8x128 128x10:bfloat16 [--html xray.html] [--chip v5e]   # the IR x-ray
    tpucourse site [--out DIR] [--serve [--port N]]        # the course site: stack, chapters, bench, instruments
    tpucourse compile exercises/ch11/matmul.py:matmul --chip v5e --shape 1024x1024,1024x1024 \
        --dtype bfloat16 --kw bm=256       # the real TPU compiler's verdict (the tpu-compile extra)
    tpucourse grade trees/* --chapters ch01,ch11 --jobs 2 [--shard K/N] --out gradebook.json   # a class
"""

from __future__ import annotations

import argparse
import sys

from .. import chips, roofline
from ..instruments import ici
from ..gates import records as rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tpucourse", description=__doc__.splitlines()[0])
    subcommands = parser.add_subparsers(dest="command", required=True)

    r = subcommands.add_parser("roofline", help="floor, bound, intensity and ridge of an op on a chip")
    r.add_argument("--chip", default=chips.DEFAULT_CHIP, help=", ".join(chips.KNOWN_CHIPS))
    r.add_argument("--op", choices=sorted(roofline.OPS),
                   help="; ".join(f"{op} ({form})" for op, (form, _) in roofline.OPS.items()))
    r.add_argument("--shape", help="e.g. 4096x4096x4096")
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--plot", metavar="PNG", help="draw the chip's roofline with the op and the records' points")
    r.add_argument("--records", default=str(rec.PUBLISHED_PATH), help="records whose points the plot shows")

    from . import records as gate_commands

    gate_commands.add_parsers(subcommands)

    m = subcommands.add_parser("mesh", help="a collective over a TPU slice, hop by hop, and its predicted time")
    m.add_argument("--chip", default=chips.DEFAULT_CHIP, help=", ".join(chips.TPU_CHIPS))
    m.add_argument("--topology", required=True, help="chips per mesh axis, e.g. 4x4 or 4x4x4")
    m.add_argument("--op", required=True, choices=ici.OPS)
    m.add_argument("--bytes", required=True, help="the whole array, e.g. 1GiB, 512MB, 34e6")
    m.add_argument("--wraparound", choices=("auto", "yes", "no"), default="auto",
                   help="whether each axis wraps around (auto: the chip's cited rule)")
    m.add_argument("--one-way", action="store_true", help="use each link in one direction only")

    k = subcommands.add_parser("blockspec", help="is a block legal for the TPU; its grid, ragged edges and VMEM")
    k.add_argument("--shape", required=True, help="the array, e.g. 1000x384")
    k.add_argument("--block", required=True, help="the block, e.g. 128x128 (None or _ squeezes a dimension)")
    k.add_argument("--dtype", default="float32")

    subcommands.add_parser("progress", help="every chapter, gate and exercise, and what to do next")
    h = subcommands.add_parser("hint", help="the next hint of an exercise, one at a time")
    h.add_argument("exercise", nargs="?", help="ch11.matmul, or ch11 for its next unfinished exercise "
                   "(default: the course's next exercise)")
    h.add_argument("--all", action="store_true", help="print every hint of the exercise")
    c = subcommands.add_parser("tick", help="tick a chapter's self-test item (\"Can you ...\"): your word, "
                               "shown by progress as self-reported")
    c.add_argument("chapter", help="chNN, e.g. ch15; alone, lists the items and your ticks")
    c.add_argument("item", nargs="?", type=int, help="the item's number (1-based)")
    c.add_argument("--undo", action="store_true", help="remove the tick")
    o = subcommands.add_parser("solution", help="an exercise's shipped solution, once your run has seen it done")
    o.add_argument("exercise", help="chNN.exercise, e.g. ch11.matmul")
    o.add_argument("--force", action="store_true", help="show it before the exercise is done (progress says so)")
    s = subcommands.add_parser("reset", help="put an exercise's stub back as shipped (your file is backed up)")
    s.add_argument("exercise", help="chNN.module, e.g. ch11.matmul")
    s.add_argument("--yes", action="store_true", help="overwrite without asking")
    w = subcommands.add_parser("watch", help="on each save under exercises/, re-run the graded tests it concerns")
    w.add_argument("target", nargs="?", help="what the first run covers: chNN (the chapter), chNN.exercise "
                   "(its tests); default: your next exercise")
    w.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    w.add_argument("--pytest-args", default="", metavar="ARGS",
                   help="extra pytest arguments, e.g. --pytest-args='--interpret fast'")

    x = subcommands.add_parser("xray", help="one function at three layers (jaxpr, StableHLO, optimized HLO), "
                            "linked op to op")
    x.add_argument("target", metavar="module.py:function")
    x.add_argument("--shapes", nargs="*", metavar="SHAPE", help="one per argument: 8x16, 8x16:bfloat16, scalar")
    x.add_argument("--html", metavar="FILE", help="write a self-contained page where hovering an op "
                   "highlights its counterparts")
    x.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    x.add_argument("--chip", help="take the optimized HLO from the real TPU compiler for this chip (v5e, v6e, "
                   "...: the tpu-compile extra) instead of this machine's XLA")

    t = subcommands.add_parser("timeline", help="a distributed kernel's schedule, round by round, and where "
                            "it deadlocks")
    t.add_argument("schedule", nargs="?", help="a shipped schedule (--list) or FILE.py:NAME, NAME a list of "
                   "programs or a function of the device count")
    t.add_argument("--devices", type=int, default=4, help="devices in the ring (default 4)")
    t.add_argument("--list", action="store_true", help="list the shipped schedules")

    from ..site import command as site_command
    from . import compile_kernel

    compile_kernel.add_parser(subcommands)
    site_command.add_parser(subcommands)
    from ..classroom import command as grade_command

    grade_command.add_parser(subcommands)

    args = parser.parse_args(argv)
    from ..readers import blockspecs
    from ..instruments import semaphore_timeline, xray_page
    from . import learner, watch

    handlers = {"roofline": _roofline, "bench": gate_commands.bench, "records": gate_commands.records,
                "mesh": ici.mesh_command,
                "blockspec": blockspecs.main, "progress": learner.progress, "hint": learner.hint,
                "reset": learner.reset, "solution": learner.solution, "tick": learner.tick, "watch": watch.main, "xray": xray_page.main,
                "compile": compile_kernel.run, "timeline": semaphore_timeline.command, "site": site_command.run,
                "grade": grade_command.run}
    try:
        return handlers[args.command](args)
    except (ValueError, learner.CommandError) as error:
        print(f"tpucourse {args.command}: {error}", file=sys.stderr)
        return 2


def _roofline(args) -> int:
    chip = chips.get_chip(args.chip)
    device = chip.per_device()  # what one JAX device gets: what gate rows are judged against
    per_device = device is not chip
    prediction = None
    if args.op or args.shape:
        if not (args.op and args.shape):
            raise ValueError("give --op and --shape together")
        cost = roofline.op_cost(args.op, roofline.parse_shape(args.shape), args.dtype)
        prediction = roofline.predict(device, cost, args.dtype)
        where = f", one JAX device: {chip.name} runs each of its {chip.devices_per_chip} devices apart" \
            if per_device else ""
        print(f"{args.op} {args.shape} {args.dtype} (roofline prediction{where})")
        print("\n".join(_chip_figures(chip, device, args.dtype)))
        print("\n".join(prediction.lines()))
        if args.op in ("matmul", "matmul_bias_act"):
            print(_rows_decision(device, roofline.parse_shape(args.shape), args.dtype))
    else:
        print("\n".join(_chip_figures(chip, device, args.dtype)))
    if args.plot:
        try:
            from ..instruments import roofline_plot
        except ImportError as error:
            print(f"tpucourse roofline: --plot needs matplotlib (pip install 'pytest-tpucourse[plot]'): {error}",
                  file=sys.stderr)
            return 2
        from ..gates import report

        points = [r for r in report.load([args.records], chips.ChipRegistry()).accepted if r.chip == chip.name]
        roofline_plot.roofline_png(device, args.plot, prediction=prediction, records=points)
        print(f"wrote {args.plot}")
    return 0


def _rows_decision(device, shape, dtype) -> str:
    """What the roofline decides for a matmul's rows: from how many it is compute-bound."""
    m, k, n = shape
    size = roofline.itemsize(dtype)
    rows = roofline.compute_bound_rows(k, n, itemsize=size, peak_flops=device.peak_for(dtype),
                                       hbm_bandwidth=device.hbm_bandwidth)
    if rows is None:
        return (f"decision    no row count makes it compute-bound: at k = {k}, n = {n} the intensity tends "
                f"to k·n / ({size}·(k + n)) = {k * n / (size * (k + n)):.1f} FLOP/byte, not above the ridge")
    return (f"decision    compute-bound from m = {rows} rows at k = {k}, n = {n} (this m = {m}: "
            f"{'compute' if m >= rows else 'memory'}-bound); fewer rows wait on HBM")


def _chip_figures(chip, device, dtype) -> list[str]:
    """The figures a prediction uses (one JAX device's), and where they come from."""
    peak = device.peak_for(dtype)
    sources = sorted({chip.sources[k] for k in ("peak_flops", "hbm_bandwidth") if k in chip.sources})
    lines = [f"{device.name}: peak {peak:.3g} FLOP/s ({dtype}), HBM {device.hbm_bandwidth:.3g} B/s, "
             f"ridge {peak / device.hbm_bandwidth:.1f} FLOP/byte"
             + (f" (from {'; '.join(sources)})" if sources else "")]
    if device is not chip:
        lines.append(f"{chip.name} per chip ({chip.devices_per_chip} JAX devices): peak "
                     f"{chip.peak_for(dtype):.3g} FLOP/s, HBM {chip.hbm_bandwidth:.3g} B/s; gate rows "
                     f"are judged per device")
    return lines


if __name__ == "__main__":
    sys.exit(main())
