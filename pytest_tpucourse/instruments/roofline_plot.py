"""A chip's roofline as a PNG (matplotlib: the optional `plot` extra)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..chips import Chip
from ..roofline import operand_cost


def roofline_png(chip: Chip, path, *, prediction=None, records=()) -> None:
    """Attainable FLOP/s against intensity; the op's prediction and measured rows as points."""
    import numpy as np

    intensity = np.logspace(-1, 4, 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.loglog(intensity, np.minimum(chip.peak_flops, intensity * chip.hbm_bandwidth), label=f"{chip.name} roofline")
    ax.axvline(chip.ridge, linestyle=":", color="grey", label=f"ridge {chip.ridge:.0f} FLOP/B")
    if prediction is not None:
        ax.plot(prediction.intensity, prediction.flops / prediction.floor_seconds, "o", label="prediction")
    for r in records:
        cost = operand_cost(r.op, r.shapes, r.dtype)
        if r.method == "measured" and r.unit == "s" and r.value is not None and cost is not None:
            ax.plot(cost.flops / cost.bytes, cost.flops / r.value, "x",
                    label=f"measured {r.op} {'x'.join(map(str, r.shapes[0]))} {r.implementation}")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("FLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
