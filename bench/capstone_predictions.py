"""Roofline predictions for chapter 15's worked capstone at its gate-05 target shapes.

    python bench/capstone_predictions.py [--chip v5e]

For each target in solutions/ch15/capstone.toml: the sliding-window kernel's roofline floor
(only the band's (query, key) pairs, roofline.attention_cost(window=...)), the same problem
computed as plain causal attention (what a kernel without band skipping does), and XLA's
floor, which computes every (query, key) pair and moves the f32 score matrix and the bf16
probabilities through HBM (written once, read once each). Predictions only: nothing is timed.
"""

import argparse
import tomllib
from pathlib import Path

from pytest_tpucourse import chips, roofline

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chip", default="v5e")
    args = parser.parse_args()
    chip = chips.get_chip(args.chip).per_device()
    manifest = tomllib.loads((ROOT / "solutions" / "ch15" / "capstone.toml").read_text())
    for t in manifest["targets"]:
        b, h, s, d, dtype, w = t["batch"], t["heads"], t["seq"], t["head_dim"], t["dtype"], t["options"]["window"]
        for backward in (False, True):
            window = roofline.predict(chip, roofline.attention_cost(b, h, s, s, d, dtype, window=w,
                                                                    backward=backward))
            causal = roofline.predict(chip, roofline.attention_cost(b, h, s, s, d, dtype, causal=True,
                                                                    backward=backward))
            full = roofline.attention_cost(b, h, s, s, d, dtype, backward=backward)
            scores = b * h * s * s * (4 + 2) * 2  # f32 scores and bf16 P, each written and read
            xla = roofline.predict(chip, roofline.Cost(full.flops, full.bytes + scores * (2 if backward else 1)))
            step = "fwd+bwd" if backward else "fwd"
            print(f"{args.chip} {dtype} (B={b}, H={h}, S={s}, D={d}) window {w} {step}: "
                  f"window kernel floor {window.floor_seconds * 1e3:.2f} ms ({window.bound}-bound), "
                  f"causal kernel floor {causal.floor_seconds * 1e3:.2f} ms, "
                  f"XLA floor {xla.floor_seconds * 1e3:.2f} ms ({xla.bound}-bound)")


if __name__ == "__main__":
    main()
