"""A chip's peak FLOP/s and HBM bandwidth, from JAX's own chip table.

`pltpu.get_tpu_info_for_chip(version, 1)` describes one TensorCore. A chip with
two TensorCores (v2, v3, v4, v5p, v7x) has twice the FLOP/s and twice the HBM
bandwidth of one core.
"""

from jax.experimental.pallas import tpu as pltpu


def chip_figures(version: str, cores: int) -> tuple[float, float]:
    """(peak bf16 FLOP/s, HBM bytes/s) of a whole chip of `cores` TensorCores."""
    core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(version), 1)
    return core.bf16_ops_per_second * cores, core.mem_bw_bytes_per_second * cores
