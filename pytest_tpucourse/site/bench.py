"""The bench page's content: the records as tables and a roofline per chip as inline SVG.

Rows are read and re-judged by gates/report.py, and shown as `report.rows_shown` gives them: a
measurement made on the chip in place of the roofline prediction it supersedes (whose value
stays in the row's "predicted floor" column), how each time was taken ("timed by", "N": the calls per
sample and what sized them), the MXU's share of the chip's peak it means, and its per-op device time
(the ops the device ran in its calls, gates/device_ops.py). A point on a plot is a row with a time and a
cost (FLOPs and HBM bytes): at its arithmetic intensity, the FLOP/s that time means. A
roofline-predicted row lies on the roof by construction and is drawn hollow, labelled
"predicted"; a measured row is drawn solid with its chip, dtype, shapes and date.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from .. import chips
from ..gates import records as rec
from ..gates import report
from .learner_view import METHOD_WORDS

COLUMNS = ("gate", "criterion", "op", "shapes", "dtype", "implementation", "what", "value", "timed by",
           "predicted floor", "verdict", "chip", "device kind", "date", "commit", "N", "MXU", "per-op device time")


def _shapes(r) -> str:
    return " · ".join("×".join(map(str, s)) for s in r.shapes)


def _value(r) -> str:
    if r.value is None:
        return "not runnable here"
    if r.method == "self-reported":
        return str(r.value)
    if r.unit == "s":
        return f"{r.value * 1e6:.1f} µs" if r.method != "off-chip-verified" else f"{r.value:g} (no time)"
    return f"{r.value:.3g} {r.unit}"


def record_rows(records) -> list[list[str]]:
    """One line per row shown (report.rows_shown), in COLUMNS' order."""
    lines = []
    for shown in report.rows_shown(records):
        r, predicted = shown.record, shown.superseded
        lines.append([f"{r.gate:02d}", r.criterion, r.op, _shapes(r), r.dtype, r.implementation,
                      f"{METHOD_WORDS[r.method]} {r.statistic}", _value(r), report.timed_by_label(r),
                      f"{predicted.value * 1e6:.1f} µs (roofline-predicted)" if predicted is not None else "",
                      r.verdict, r.chip or "any", r.device_kind if r.method == "measured" else "", r.date[:10],
                      report.commit_label(r), report.sampling_label(r), report.mxu_label(r), report.ops_label(r)])
    return lines


def failure_lines(records) -> list[str]:
    """Every failed row, the latest run's or not: failures stay published."""
    return [f"{r.date[:10]} {r.chip} gate {r.gate:02d} {r.criterion}: {r.op} {r.dtype} {r.implementation}, "
            f"{METHOD_WORDS[r.method]} {r.statistic} ({r.test_id})"
            for r in sorted(records, key=lambda r: r.date) if r.verdict == "fail"]


def sections(course_root: Path) -> tuple[list[dict], list]:
    """The two record sets (the course's reference solutions, the learner's own) and all their rows."""
    registry = chips.ChipRegistry()
    out, every = [], []
    for title, path, tree, note in (
            ("The course's reference solutions", rec.PUBLISHED_PATH, "solutions",
             "bench/records.jsonl: rows of --solutions runs; never counted as yours."),
            ("Your records", rec.DEFAULT_PATH, "exercises",
             ".tpucourse/records.jsonl: rows of your exercises/ runs; your gates are judged from these.")):
        loaded = report.load([Path(course_root) / path], registry, tree=tree)
        every += loaded.accepted
        out.append({"title": title, "note": note, "columns": COLUMNS, "rows": record_rows(loaded.accepted),
                    "failures": failure_lines(loaded.accepted), "problems": loaded.problems(),
                    "empty": f"no rows yet in {path}: a gate run (pytest --gates) writes them"})
    return out, every


def plot_svg(chip_name: str, records, width: int = 560, height: int = 340) -> str:
    """One chip's roofline (one JAX device's peak bf16 and HBM bandwidth), its ridge, and every timed row."""
    device = chips.get_chip(chip_name).per_device()
    peak, bandwidth = device.peak_for("bfloat16"), device.hbm_bandwidth
    ridge = peak / bandwidth
    left, right, top, bottom = 64, 16, 18, 44
    x_lo, x_hi = -1.0, 4.0  # log10 FLOP/byte: 0.1 .. 10^4
    y_hi = math.ceil(math.log10(peak) + 0.3)
    y_lo = y_hi - 5

    def x(intensity):
        return left + (math.log10(intensity) - x_lo) / (x_hi - x_lo) * (width - left - right)

    def y(flops):
        return top + (y_hi - math.log10(flops)) / (y_hi - y_lo) * (height - top - bottom)

    roof = [(10 ** x_lo, 10 ** x_lo * bandwidth), (ridge, peak), (10 ** x_hi, peak)]
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(a):.1f},{y(max(b, 10 ** y_lo)):.1f}" for i, (a, b) in enumerate(roof))
    parts = [f'<svg class="roofline" viewBox="0 0 {width} {height}" role="img" aria-label="roofline of {chip_name}">',
             f'<text class="title" x="{left}" y="12">{html.escape(device.name)}: peak {peak:.3g} FLOP/s bf16, '
             f'HBM {bandwidth:.3g} B/s (chips.py)</text>']
    for decade in range(int(x_lo), int(x_hi) + 1):
        parts.append(f'<line class="grid" x1="{x(10 ** decade):.1f}" x2="{x(10 ** decade):.1f}" y1="{top}" '
                     f'y2="{height - bottom}"/><text class="axis" x="{x(10 ** decade):.1f}" y="{height - bottom + 14}" '
                     f'text-anchor="middle">1e{decade}</text>')
    for decade in range(y_lo, y_hi + 1):
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(10 ** decade):.1f}" '
                     f'y2="{y(10 ** decade):.1f}"/><text class="axis" x="{left - 6}" y="{y(10 ** decade) + 4:.1f}" '
                     f'text-anchor="end">1e{decade}</text>')
    parts += [f'<path class="roof" d="{path}"/>',
              f'<line class="ridge" x1="{x(ridge):.1f}" x2="{x(ridge):.1f}" y1="{y(peak):.1f}" y2="{height - bottom}"/>',
              f'<text class="ridge-label" x="{x(ridge) + 4:.1f}" y="{height - bottom - 6}">ridge {ridge:.0f} FLOP/byte</text>',
              f'<text class="axis" x="{(left + width) / 2}" y="{height - 6}" text-anchor="middle">arithmetic intensity '
              f'(FLOP per HBM byte)</text>',
              f'<text class="axis" transform="rotate(-90)" x="{-(top + height - bottom) / 2}" y="14" '
              f'text-anchor="middle">FLOP/s</text>']
    points = timed_points(chip_name, records)
    for number, (r, intensity, rate, label) in enumerate(points, 1):
        parts.append(f'<g class="point {r.method}"><circle cx="{x(intensity):.1f}" cy="{y(rate):.1f}" r="4">'
                     f'<title>{html.escape(label)}</title></circle>'
                     f'<text x="{x(intensity) + 5:.1f}" y="{y(rate) + (13 if number % 2 else -6):.1f}">{number}</text></g>')
    if not points:
        parts.append(f'<text class="axis" x="{left + 10}" y="{height - bottom - 24}">no timed rows for this chip yet</text>')
    parts.append("</svg>")
    legend = "".join(f'<li class="{r.method}">{html.escape(label)}</li>' for r, _, _, label in points)
    return "".join(parts) + f'<ol class="legend">{legend}</ol>'


def timed_points(chip_name: str, records) -> list[tuple]:
    """(row, FLOP/byte, FLOP/s, what it is) for each distinct timed row of a chip with a cost."""
    points, seen = [], set()
    for r in sorted(records, key=lambda r: (r.gate, r.op, r.shapes)):
        if r.chip != chip_name or not r.cost or r.unit != "s" or not isinstance(r.value, (int, float)) \
                or r.method not in ("roofline-predicted", "measured") or not r.value:
            continue
        key = (r.op, r.shapes, r.dtype, r.method, r.implementation)
        if key in seen:
            continue
        seen.add(key)
        intensity = r.cost["flops"] / r.cost["bytes"]
        what = "roofline-predicted" if r.method == "roofline-predicted" else f"measured on {r.chip}, {r.date[:10]}"
        label = (f"gate {r.gate:02d} {r.op} {_shapes(r)} {r.dtype} ({r.implementation}): {what}, "
                 f"{r.value * 1e6:.1f} µs, {intensity:.1f} FLOP/byte")
        points.append((r, intensity, r.cost["flops"] / r.value, label))
    return points


def plots(records) -> list[str]:
    """A plot per chip that has rows, and always the course's default chip."""
    names = sorted({r.chip for r in records if r.chip in chips.KNOWN_CHIPS} | {chips.DEFAULT_CHIP})
    return [f'<figure>{plot_svg(name, records)}<figcaption>{html.escape(name)}: every point numbered, the list '
            f'says what each is; hollow points are roofline predictions (on the roof by construction), solid ones '
            f'measured runs</figcaption></figure>' for name in names]
