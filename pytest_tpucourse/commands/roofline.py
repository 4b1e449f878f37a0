"""`tpucourse roofline`: an op's floor, bound, intensity and ridge on a chip, from the chip table's figures.

    tpucourse roofline --chip v5e --op matmul --shape 4096x4096x4096 --dtype bfloat16
    tpucourse roofline --chip v5e --plot roofline.png      # needs the `plot` extra
"""

from __future__ import annotations

import sys

from .. import chips
from .. import roofline as model
from ..gates import records as rec
from ..run import registered_chips


def add_parser(subcommands):
    r = subcommands.add_parser("roofline", help="floor, bound, intensity and ridge of an op on a chip")
    r.add_argument("--chip", default=chips.DEFAULT_CHIP, help=", ".join(chips.KNOWN_CHIPS) + ", or one a plugin registers")
    r.add_argument("--op", choices=sorted(model.OPS),
                   help="; ".join(f"{op} ({form})" for op, (form, _) in model.OPS.items()))
    r.add_argument("--shape", help="e.g. 4096x4096x4096")
    r.add_argument("--dtype", default="bfloat16")
    r.add_argument("--plot", metavar="PNG", help="draw the chip's roofline with the op and the records' points")
    r.add_argument("--records", default=str(rec.PUBLISHED_PATH), help="records whose points the plot shows")
    return r


def run(args) -> int:
    chip = registered_chips.named(args.chip)  # built in, or registered by a plugin or conftest here
    device = chip.per_device()  # what one JAX device gets: what gate rows are judged against
    per_device = device is not chip
    prediction = None
    if args.op or args.shape:
        if not (args.op and args.shape):
            raise ValueError("give --op and --shape together")
        cost = model.op_cost(args.op, model.parse_shape(args.shape), args.dtype)
        prediction = model.predict(device, cost, args.dtype)
        where = f", one JAX device: {chip.name} runs each of its {chip.devices_per_chip} devices apart" \
            if per_device else ""
        print(f"{args.op} {args.shape} {args.dtype} (roofline prediction{where})")
        print("\n".join(_chip_figures(chip, device, args.dtype)))
        print("\n".join(prediction.lines()))
        if args.op in ("matmul", "matmul_bias_act"):
            print(_rows_decision(device, model.parse_shape(args.shape), args.dtype))
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


def _rows_decision(device: chips.Chip, shape, dtype) -> str:
    """What the roofline decides for a matmul's rows: from how many it is compute-bound."""
    m, k, n = shape
    size = model.itemsize(dtype)
    rows = model.compute_bound_rows(k, n, itemsize=size, peak_flops=device.peak_for(dtype),
                                    hbm_bandwidth=device.hbm_bandwidth)
    if rows is None:
        return (f"decision    no row count makes it compute-bound: at k = {k}, n = {n} the intensity tends "
                f"to 2·k·n / ({size}·(k + n)) = {2 * k * n / (size * (k + n)):.1f} FLOP/byte, not above the ridge")
    return (f"decision    compute-bound from m = {rows} rows at k = {k}, n = {n} (this m = {m}: "
            f"{'compute' if m >= rows else 'memory'}-bound); fewer rows wait on HBM")


def _chip_figures(chip: chips.Chip, device: chips.Chip, dtype) -> list[str]:
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
