"""Chapter 15 (capstone): what JAX's splash attention does with the worked capstone's variant, read off
the installed toolchain under TPU interpret mode. docs/facts.md lists each claim beside its test."""

from __future__ import annotations

import contextlib
import inspect
import io

import jax
import jax.numpy as jnp
import numpy as np

from pytest_tpucourse import references
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.core import jax_internals
from pytest_tpucourse.public_kernels import splash_attention
from pytest_tpucourse.readers import traced_program

from .toolchain import for_this_jax, interpreted, tpu_interpret


def test_splashs_local_mask_computes_the_sliding_window():
    """Read at (1, 2, 256, 64) with a window of 100 (the README's figure is (1, 2, 512, 128), window 200)."""
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 2, 256, 64), jnp.float32) for i in range(3))
    with interpreted(tpu_interpret()):
        out = np.asarray(splash_attention(q, k, v, window=100), np.float64)
    with jax.enable_x64(True):
        oracle, _ = references.sliding_window_attention_oracle(*(jnp.asarray(np.asarray(a), jnp.float64) for a in (q, k, v)),
                                                               window=100)
        oracle = np.asarray(oracle)
    assert np.linalg.norm(out - oracle) / np.linalg.norm(oracle) < 1e-5


def test_splashs_forward_outputs_and_the_race_they_make_on_two_cores():
    """jax 0.10.2's splash forward returns its running max, sum and accumulator as extra outputs
    written at block (0, 0) by every head (so does 0.11.2's); jax 0.12.0.1's keeps them in scratch."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel

    shape = (1, 2, 256, 64)
    closed = jax.make_jaxpr(lambda q, k, v: splash_attention(q, k, v, window=100))(*[jax.ShapeDtypeStruct(shape, jnp.float32)] * 3)
    (forward,) = traced_program.pallas_call_eqns(closed)
    outputs = [tuple(v.aval.shape) for v in forward.outvars]
    assert outputs == for_this_jax({"0.10.2": [(128, 128), (128, 128), (128, 64), (2, 256, 64)],
                                    "0.11.2": [(128, 128), (128, 128), (128, 64), (2, 256, 64)],
                                    "0.12.0.1": [(2, 256, 64)]})
    assert forward.params["compiler_params"].dimension_semantics[0] == "parallel"  # the head axis
    todo = "TODO(sharadmv): convert m/l to be scratch" in inspect.getsource(splash_attention_kernel)
    assert todo == for_this_jax({"0.10.2": True, "0.11.2": True, "0.12.0.1": False})

    x = jax.random.normal(jax.random.key(0), shape, jnp.float32)
    printed = io.StringIO()
    try:
        with interpreted(tpu_interpret(**tpu_rules.SETTINGS["races"])), contextlib.redirect_stdout(printed):
            jax.block_until_ready(splash_attention(x, x, x, window=100))
            raced = jax_internals.races_found()
    except Exception as error:  # jax 0.12 raises on a race
        raced = "RACE DETECTED" in str(error)
    assert raced == for_this_jax({"0.10.2": True, "0.11.2": True, "0.12.0.1": False})


def test_the_worked_write_up_quotes_gate_05s_measured_rows():
    """solutions/ch15/WRITEUP.md's table and ratios are gate 05's measured rows (bench/records.jsonl), each
    slot's latest run (its kernel, floor and ceiling rows sharing one run_id), its floors' multiples their
    predicted rows'."""
    import json
    import re

    from . import measured

    text = (measured.COURSE / "solutions" / "ch15" / "WRITEUP.md").read_text(encoding="utf-8")
    prose = " ".join(text.split())
    assert "There are no measured TPU rows" not in prose and "Measured rows: none" not in prose
    predicted = {}
    for line in (measured.BENCH / "records.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("gate") == 5 and row.get("method") == "roofline-predicted" and row["implementation"] == "floor":
            predicted[row["op"]] = row["value"] * 1e6
    multiples = []
    for step, window in (("fwd", 1024), ("fwd", 2048), ("fwd+bwd", 1024), ("fwd+bwd", 2048)):
        op = f"capstone-{step.replace('+', '-')}-window{window}"
        latest = measured.latest_us(5, op)  # one run's trio: the slot's latest
        kernel, xla, splash = (round(latest[which], 1) for which in ("kernel", "floor", "ceiling"))
        row = (rf"\| [^|]*window {window} \| {re.escape(step)} \| {kernel} µs \| {xla} µs \| {kernel / xla:.3f} \| "
               rf"{splash} µs \| {kernel / splash:.3f} \|")
        assert re.search(row, text), f"WRITEUP.md has no row {op}: {kernel}, {xla}, {splash}"
        multiples.append(f"{kernel / predicted[op]:.1f}×")
    assert f"the forward runs at {multiples[0]} and {multiples[1]} its floor" in prose
    assert f"the forward + backward at {multiples[2]} and {multiples[3]}" in prose
    forward = round(measured.latest_us(5, "capstone-fwd-window1024")["kernel"], 1)
    assert f"the forward measured {forward} µs at 512 × 512" in prose


def test_where_splash_races_the_raced_blocks_are_the_outputs_nothing_reads():
    """The race the README shows, where the installed splash has it: each of the detector's
    reports is two cores writing one whole HBM block of an output the program never reads (its
    index map (0, 0) at every step), and the two cores ran the two heads' steps, (0, i, j) on
    core 0 and (1, i, j) on core 1. The attention itself, one block per (head, q block), is not
    raced."""
    import re

    from jax.experimental.pallas import tpu as pltpu

    shape = (1, 2, 256, 64)
    x = jax.random.normal(jax.random.key(0), shape, jnp.float32)
    closed = jax.make_jaxpr(lambda q, k, v: splash_attention(q, k, v, window=100))(x, x, x)
    (forward,) = traced_program.pallas_call_eqns(closed)
    unread = traced_program.unread_outputs(closed)[id(forward)]
    state = sorted(tuple(forward.outvars[i].aval.shape) for i in unread)

    points = []

    def record(token, coords, core):
        points.append((tuple(int(c) for c in coords), int(core)))
        return token

    printed = io.StringIO()
    params = pltpu.InterpretParams(random_seed=0, grid_point_recorder=record,
                                   **tpu_rules.SETTINGS["races"], **jax_internals.race_detection_options())
    with interpreted(params), contextlib.redirect_stdout(printed), jax_internals.race_reports_into(printed):
        jax.block_until_ready(splash_attention(x, x, x, window=100))
    reports = printed.getvalue().split("RACE DETECTED")[1:]
    if not reports:  # jax 0.12.0.1: the state is scratch, nothing unread, nothing raced
        assert state == []
        return
    raced = []
    for report in reports:
        writes = re.findall(r"write of \('hbm', (\d+)[^)]*\)\[\((.*?)\)\] from (\d+), (\d+)", report)
        assert len(writes) == 2 and writes[0][:2] == writes[1][:2]  # one block, written twice
        assert {core for *_, core in writes} == {"0", "1"}  # by the two cores
        raced.append(tuple(int(stop) - int(start) for start, stop in re.findall(r"slice\((\d+), (\d+)", writes[0][1])))
    assert sorted(raced) == state == [(128, 64), (128, 128), (128, 128)]
    assert forward.params["compiler_params"].dimension_semantics[0] == "parallel"
    assert {point for point, core in points if core == 0} == {(0, i, j) for i in (0, 1) for j in (0, 1)}
    assert {point for point, core in points if core == 1} == {(1, i, j) for i in (0, 1) for j in (0, 1)}


def test_the_chapters_gate_05_table_quotes_each_slots_latest_run():
    """The README's gate 05 table: per slot, its latest run's kernel, floor and ceiling rows (one run_id,
    bench/records.jsonl), their ratios, and the baselines that run was timed against (the current ones
    where the ceiling row's notes name a search's choice of splash attention, the old three-block sweep
    where they say so)."""
    import re

    from . import measured
    from .reading import readme_prose

    text = (measured.COURSE / "exercises" / "ch15" / "README.md").read_text(encoding="utf-8")
    for step, name, window, shape in (("forward", "fwd", 1024, "1×16×8192×128"), ("forward", "fwd", 2048, "1×4×16384×128"),
                                      ("forward + backward", "fwd-bwd", 1024, "1×16×8192×128"),
                                      ("forward + backward", "fwd-bwd", 2048, "1×4×16384×128")):
        trio = measured.latest_run(5, f"capstone-{name}-window{window}")
        kernel, xla, splash = (round(trio[which]["value"] * 1e6, 1) for which in ("kernel", "floor", "ceiling"))
        notes = trio["ceiling"]["notes"]
        searched = re.search(r"ceiling (\d+x\d+/\d+)(-bwd\d+x\d+)?(-fused)? of splash attention, the choice of a "
                             r"search", notes)
        assert searched or "ceiling tuned over 3 block sizes" in notes, notes
        if searched:
            assert searched.group(1) == "512x512/512" and searched.group(2) in (None, "-bwd512x512")
            assert searched.group(3) is None  # "unfused" in the page
        baselines = "banded floor, searched splash" if searched else "old: dense floor, f32-wrapped splash"
        row = (rf"\| {re.escape(step)}, window {window}, {shape} \| {re.escape(baselines)} \| {kernel} µs \| {xla} µs \| "
               rf"{kernel / xla:.3f} \| {splash} µs \| {kernel / splash:.3f} \|")
        assert re.search(row, text), f"exercises/ch15/README.md has no row {name} {window}: {kernel}, {xla}, {splash}"
    assert "512 × 512, key sub-block 512, at both windows" in readme_prose("ch15")
