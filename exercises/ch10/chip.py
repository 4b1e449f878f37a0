"""Exercise ch10.chip: a chip's peak and bandwidth from JAX (README: "Per core, per chip")."""

from jax.experimental.pallas import tpu as pltpu


def chip_figures(version: str, cores: int) -> tuple[float, float]:
    """(peak bf16 FLOP/s, HBM bytes/s) of a whole chip.

    version: a pltpu.ChipVersion value ("v4", "v5e", "7x", ...); cores: the chip's
    TensorCores (2 for v2, v3, v4, v5p, v7x; 1 for v5e, v6e). Use
    pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(version), 1).
    """
    raise NotImplementedError("write chip_figures(): JAX describes one TensorCore; a chip has `cores` of them")
