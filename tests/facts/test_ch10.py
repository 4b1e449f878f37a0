"""Chapter 10 (the machine): what JAX's chip table and libtpu's described topologies say about cores,
devices and the roofline's figures. docs/facts.md lists each claim beside its test."""

from __future__ import annotations

import decimal
import json
import os
import subprocess
import sys

import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import chips
from pytest_tpucourse.readers import hlo_text

from . import measured
from .reading import readme_prose
from .toolchain import compiler, course_file


def test_v5es_figures_are_jaxs():
    core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion("v5e"), 1)
    assert (core.bf16_ops_per_second, core.mem_bw_bytes_per_second) == (1.97e14, 8.2e11)


@pytest.mark.parametrize("chip, megacore", [("v2", False), ("v3", False), ("v4", True), ("v5e", False),
                                            ("v5p", True), ("v6e", False), ("v7x", False)])
def test_jax_lets_two_cores_be_one_device_on_v4_and_v5p_only(chip, megacore):
    version = pltpu.ChipVersion(chips.get_chip(chip).jax_version)
    one = pltpu.get_tpu_info_for_chip(version, 1)
    if megacore:
        two = pltpu.get_tpu_info_for_chip(version, 2)
        assert two.num_cores == 2 and two.bf16_ops_per_second == one.bf16_ops_per_second  # per core, as asked with 1
    else:
        with pytest.raises(ValueError, match="num_tensor_cores_per_logical_device=1"):
            pltpu.get_tpu_info_for_chip(version, 2)


DESCRIBE = """
import json, jax
from jax.experimental import topologies
jax.devices()
out = {}
for chip, name in %r:
    devices = topologies.get_topology_desc(topology_name=name, platform="tpu").devices
    out[chip] = [len(devices), getattr(devices[0], "num_cores", None)]
print("TOPOLOGIES " + json.dumps(out))
"""


def test_the_described_slices_of_four_chips_and_their_devices():
    """libtpu's compile-only topologies (each chip's compile_topology in chips.py, four chips each), read in a process of
    their own: libtpu locks a file when it makes a topology unless told another process may hold it."""
    compiler()
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", DESCRIBE % ([(name, chips.get_chip(name).compile_topology) for name in chips.TPU_CHIPS],)],
                          capture_output=True, text=True, env=env, timeout=300)
    line = next(line for line in done.stdout.splitlines() if line.startswith("TOPOLOGIES "))
    assert json.loads(line.split(" ", 1)[1]) == {
        "v2": [8, 1], "v3": [8, 1], "v4": [8, 1],  # a device per core (v4 too, as libtpu describes it)
        "v5e": [4, 1], "v6e": [4, 1],  # one core per chip
        "v5p": [4, 2],  # megacore: both cores one device
        "v7x": [8, 1],
    }


def _loop_carry(module) -> list[str]:
    """The element types of the ENTRY `while`'s carried tuple, layouts and memory spaces included."""
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    return re.findall(r"\w+\[[\d,]*\](?:\{[^}]*\})?", loop.shape)


def test_the_device_loop_keeps_the_adds_inputs_in_vmem_and_the_skinny_matmuls_weight_in_hbm():
    """bench/timing_methods.py's device loop, compiled for a v5e with the trip counts it ran
    (bench/tpu/timing_methods.json): XLA:TPU copies the add's two inputs into VMEM (S(1)) before the
    loop and carries them there; the skinny matmul's loop carries its weight in HBM."""
    compile_for = compiler()
    loop = course_file("bench/timing_methods.py").device_loop
    ran = measured.timing_methods()
    S = jax.ShapeDtypeStruct
    found = {}
    for name, fn, args in (("xla_add_4096", jnp.add, (S((4096, 4096), jnp.bfloat16),) * 2),
                           ("xla_skinny_8x4096x4096", jnp.matmul,
                            (S((8, 4096), jnp.bfloat16), S((4096, 4096), jnp.bfloat16)))):
        run, _, _ = loop(fn, args, ran[name]["device"]["n"])
        compiled = compile_for(lambda x, y, o, run=run: run((x, y), o), *args, jax.eval_shape(fn, *args), chip="v5e")
        module = hlo_text.parse(compiled.optimized_hlo)
        copied = sum(i.opcode == "copy-start" and "S(1)" in i.shape for i in module.entry.instructions)
        found[name] = (_loop_carry(module), copied)
    add, copied = found["xla_add_4096"]
    assert sum(t.startswith("bf16[4096,4096]") and "S(1)" in t for t in add) == 2 and copied == 2, add
    skinny, copied = found["xla_skinny_8x4096x4096"]
    assert not any("S(1)" in t for t in skinny) and copied == 0, skinny
    page = readme_prose("ch10")
    assert "copies both of the add's inputs into VMEM (`S(1)`) before the loop" in page
    assert "the skinny matmul's loop reads its weight from HBM each time" in page


def _tenths(value: float) -> str:
    """A figure to one decimal as a reader rounds what the file prints (731.15 is 731.2)."""
    return str(decimal.Decimal(str(value)).quantize(decimal.Decimal("0.1"), decimal.ROUND_HALF_UP))


def _us(value: float) -> str:
    return f"{_tenths(value)} µs"


def _span(values) -> str:
    return f"{_tenths(min(values))}-{_tenths(max(values))} µs"


def test_the_chapters_timing_figures_are_the_rows_and_the_timing_methods_files():
    """Every figure chapter 10 and docs/gates.md ("Device time") quote for the ways of timing gate 00's
    programs, read off bench/tpu/timing_methods.json, gate 00's measured rows and the block sweep."""
    ran = measured.timing_methods()
    skinny, matmul, add = (ran[k] for k in ("xla_skinny_8x4096x4096", "xla_matmul_4096", "xla_add_4096"))
    issued = _span([row["wall_per_call"] * 1e6 for row in measured.gate_rows(0, "matmul", "floor", [8, 4096])])
    profiled = {name: measured.gate_us(0, op, "floor", shape) for name, op, shape in
                (("skinny", "matmul", [8, 4096]), ("matmul", "matmul", [4096, 4096]), ("add", "add", [4096, 4096]))}
    sweep_xla = measured.matmul_sweep()["xla"]
    chapter = [_us(skinny["device"]["one_call_with_sync_us"]), _us(skinny["calls_us"]), _span(skinny["device"]["spread"]),
               _us(skinny["device"]["per_call_us"]), _us(add["device"]["per_call_us"]), issued,
               _us(min(profiled["skinny"])), _us(min(profiled["matmul"])), _us(sweep_xla), _us(min(profiled["add"]))]
    page = readme_prose("ch10")
    assert [f for f in chapter if f not in page] == []
    gates_doc = " ".join((measured.COURSE / "docs" / "gates.md").read_text(encoding="utf-8").split())
    table = [_us(r["device"]["one_call_with_sync_us"]) for r in (skinny, matmul, add)] + \
            [_us(r["calls_us"]) for r in (skinny, matmul, add)] + \
            [_span(r["device"]["spread"]) for r in (skinny, matmul, add)] + \
            [issued, _span([sweep_xla, *profiled["matmul"]]), _us(min(profiled["skinny"])), _us(min(profiled["add"]))]
    assert [f for f in table if f not in gates_doc] == []
