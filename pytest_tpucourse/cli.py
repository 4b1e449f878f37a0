"""The `tpucourse` command: the learner's loop, the roofline playground in a terminal, the bench page.

    tpucourse roofline --chip v5e --op matmul --shape 4096x4096x4096 --dtype bfloat16
    tpucourse roofline --chip v5e --plot roofline.png      # needs the `plot` extra
    tpucourse bench                                        # bench/records.jsonl -> bench/README.md
    tpucourse progress | hint ch11.matmul | reset ch11.matmul | watch ch11   # the learner's loop
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import chips, roofline
from . import records as rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tpucourse", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    r = commands.add_parser("roofline", help="floor, bound, intensity and ridge of an op on a chip")
    r.add_argument("--chip", default=chips.DEFAULT_PREDICTION_CHIP, help=", ".join(chips.KNOWN_CHIPS))
    r.add_argument("--op", choices=sorted(roofline.OPS),
                   help="; ".join(f"{op} ({form})" for op, (form, _) in roofline.OPS.items()))
    r.add_argument("--shape", help="e.g. 4096x4096x4096")
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--plot", metavar="PNG", help="draw the chip's roofline with the op and the records' points")
    r.add_argument("--records", default=str(rec.DEFAULT_PATH), help="records whose points the plot shows")

    b = commands.add_parser("bench", help="regenerate bench/README.md from the gate records")
    b.add_argument("--records", default=str(rec.DEFAULT_PATH))
    b.add_argument("--output", default=None, help="default: README.md next to the records")

    p = commands.add_parser("progress", help="every chapter, gate and exercise, and what to do next")
    h = commands.add_parser("hint", help="the next hint of an exercise, one at a time")
    h.add_argument("exercise", nargs="?", help="ch11.matmul, or ch11 for its next unfinished exercise "
                   "(default: the course's next exercise)")
    h.add_argument("--all", action="store_true", help="print every hint of the exercise")
    s = commands.add_parser("reset", help="put an exercise's stub back as shipped (your file is backed up)")
    s.add_argument("exercise", help="chNN.module, e.g. ch11.matmul")
    s.add_argument("--yes", action="store_true", help="overwrite without asking")
    w = commands.add_parser("watch", help="re-run a chapter's graded tests whenever a file under exercises/ changes")
    w.add_argument("chapter", nargs="?", help="chNN (default: the chapter of your next exercise)")
    w.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    w.add_argument("--pytest-args", default="", metavar="ARGS",
                   help="extra pytest arguments, e.g. --pytest-args='--interpret fast'")

    args = parser.parse_args(argv)
    from . import learner_cli, watch

    handlers = {"roofline": _roofline, "bench": _bench, "progress": learner_cli.progress,
                "hint": learner_cli.hint, "reset": learner_cli.reset, "watch": watch.main}
    try:
        return handlers[args.command](args)
    except (ValueError, rec.CorruptRecords, learner_cli.CommandError) as error:
        print(f"tpucourse {args.command}: {error}", file=sys.stderr)
        return 2


def _roofline(args) -> int:
    chip = chips.get_chip(args.chip)
    prediction = None
    if args.op or args.shape:
        if not (args.op and args.shape):
            raise ValueError("give --op and --shape together")
        cost = roofline.op_cost(args.op, roofline.parse_shape(args.shape), args.dtype)
        prediction = roofline.predict(chip, cost)
        print(f"{args.op} {args.shape} {args.dtype} (roofline prediction)")
        print("\n".join(prediction.lines()))
    else:
        print(f"{chip.name}: peak {chip.peak_flops:.3g} FLOP/s, HBM {chip.hbm_bandwidth:.3g} B/s, "
              f"ridge {chip.ridge:.1f} FLOP/byte")
    if args.plot:
        try:
            from . import plot
        except ImportError as error:
            print(f"tpucourse roofline: --plot needs matplotlib (pip install 'pytest-tpucourse[plot]'): {error}",
                  file=sys.stderr)
            return 2
        points = [r for r in rec.read(args.records) if r.chip == chip.name] if Path(args.records).exists() else []
        plot.roofline_png(chip, args.plot, prediction=prediction, records=points)
        print(f"wrote {args.plot}")
    return 0


def _bench(args) -> int:
    from . import report

    path = Path(args.records)
    output = Path(args.output) if args.output else path.parent / "README.md"
    all_records = rec.read(path)
    output.write_text(report.bench_readme(all_records), encoding="utf-8")
    print(f"wrote {output} from {len(all_records)} records in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
