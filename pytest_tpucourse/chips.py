"""Chips the course can predict for or measure on.

The names are what `--chip` and `@pytest.mark.roofline(chip=...)` accept. Their
figures (peak FLOP/s, HBM bandwidth, VMEM, ICI) live with the roofline.
"""

from __future__ import annotations

TPU_CHIPS = ("v2", "v3", "v4", "v5e", "v5p", "v6e", "v7x")
GPU_CHIPS = ("a100", "h100", "h200")
KNOWN_CHIPS = TPU_CHIPS + GPU_CHIPS
DEFAULT_PREDICTION_CHIP = "v5e"


def validate_chip(name: str) -> str:
    """Normalise a chip name or raise ValueError naming the known ones."""
    normalised = name.strip().lower()
    if normalised.startswith("tpu"):
        normalised = normalised[3:].lstrip("-_ ")
    if normalised not in KNOWN_CHIPS:
        raise ValueError(
            f"unknown chip {name!r}; known chips: {', '.join(KNOWN_CHIPS)}"
        )
    return normalised
