"""Chapter 10 (the machine): what JAX's chip table and libtpu's described topologies say about cores,
devices and the roofline's figures. docs/facts.md lists each claim beside its test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import chips

from .toolchain import compiler


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
