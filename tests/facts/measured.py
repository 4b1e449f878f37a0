"""What the chip measured, as the course commits it, for the facts tests that read a page's figures off it.

Gate rows (bench/records.jsonl), the matmul block sweep (bench/tpu/matmul_sweep.log), the timing methods
(bench/tpu/timing_methods.json) and the precision table (bench/tpu/precision.json). Nothing here measures:
a figure no committed file holds is no figure a page may quote, and the tests that use these readers hold
each quoted figure to the file it came from.
"""

from __future__ import annotations

import json
import re

from pytest_tpucourse import chips

from .reading import COURSE

BENCH = COURSE / "bench"
V5E = chips.get_chip("v5e")


def gate_rows(gate: int, op: str, implementation: str, shapes: list | None = None) -> list[dict]:
    """The measured rows (a median each) of one gate slot's implementation, in the order they were written."""
    found = []
    for line in (BENCH / "records.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if (row.get("method"), row.get("statistic"), row.get("gate"), row.get("op"), row.get("implementation")) == \
                ("measured", "median", gate, op, implementation) and (shapes is None or row["shapes"][0] == shapes):
            found.append(row)
    assert found, f"bench/records.jsonl holds no measured median of gate {gate:02d} {op} {implementation} {shapes}"
    return found


def gate_us(gate: int, op: str, implementation: str, shapes: list | None = None) -> list[float]:
    """The medians of gate_rows, in µs."""
    return [row["value"] * 1e6 for row in gate_rows(gate, op, implementation, shapes)]


def latest_run(gate: int, op: str, shapes: list | None = None) -> dict[str, dict]:
    """One gate slot's latest run: {"kernel": row, "floor": row, "ceiling": row} (those it timed), the rows
    sharing the run_id of the slot's last measured median. A slot's runs may have been measured against
    different baselines (gate 03's ceiling before and after its search, gate 05's dense and banded
    floors), so a ratio or a trio a page quotes is one run's, never a minimum over runs."""
    rows = []
    for implementation in ("kernel", "floor", "ceiling"):
        try:
            rows += gate_rows(gate, op, implementation, shapes)
        except AssertionError:
            continue
    assert rows, f"bench/records.jsonl holds no measured median of gate {gate:02d} {op} {shapes}"
    last = max(rows, key=lambda row: row["date"])["run_id"]
    trio = {row["implementation"]: row for row in rows if row["run_id"] == last}
    assert "kernel" in trio, f"gate {gate:02d} {op} {shapes}: the latest run ({last}) has no kernel row"
    return trio


def latest_us(gate: int, op: str, shapes: list | None = None) -> dict[str, float]:
    """latest_run's medians in µs, by implementation."""
    return {which: row["value"] * 1e6 for which, row in latest_run(gate, op, shapes).items()}


def matmul_sweep() -> dict[str, float]:
    """The first group of bench/tpu/matmul_sweep.log (the run the chapters quote), µs by label:
    "xla", "zeroed 512x512x512", "assigned 1024x512x1024", ..."""
    found: dict[str, float] = {}
    for line in (BENCH / "tpu" / "matmul_sweep.log").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and found:
            break  # the log's earlier run follows its own comment
        match = re.match(r"matmul\s+(xla|\w+ \d+x\d+x\d+)\s+([\d.]+) us", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def blocks_hbm_bytes(m: int, k: int, n: int, bm: int, bn: int, itemsize: int = 2) -> int:
    """A tiled matmul's HBM traffic on grid (M/bm, N/bn, K/bk): x once per column block, y once per row
    block, the output once (chapter 8's formula; bk does not enter)."""
    return itemsize * (m * k * (n // bn) + k * n * (m // bm) + m * n)


def timing_methods() -> dict:
    """bench/tpu/timing_methods.json: one call and its sync, 200 calls per sync, a device-side loop."""
    return json.loads((BENCH / "tpu" / "timing_methods.json").read_text(encoding="utf-8"))


def precision() -> dict:
    """bench/tpu/precision.json's figures: relative error against float64, by label."""
    return json.loads((BENCH / "tpu" / "precision.json").read_text(encoding="utf-8"))["figures"]


def bandwidth(row: dict) -> float:
    """Bytes per second a measured row moved: its cost's bytes over its median."""
    return row["cost"]["bytes"] / row["value"]


def achieved_bandwidths() -> dict[str, float]:
    """The HBM bandwidths the chip reached, B/s: XLA's 4096² bf16 add (gate 00, the profiler) and XLA's
    skinny 8×4096×4096 matmul in a device-side loop, whose weight comes from HBM every step."""
    add = min(bandwidth(row) for row in gate_rows(0, "add", "floor"))
    skinny_row = gate_rows(0, "matmul", "floor", [8, 4096])[0]
    skinny = skinny_row["cost"]["bytes"] / (timing_methods()["xla_skinny_8x4096x4096"]["device"]["per_call_us"] * 1e-6)
    return {"add": add, "skinny loop": skinny}


def practical_ridge() -> float:
    """FLOP per byte at which v5e's peak FLOP/s meets the add's achieved bandwidth (the spec's ridge is 240)."""
    return V5E.peak_flops / achieved_bandwidths()["add"]
