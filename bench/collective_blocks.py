"""Gate 04's compute alone at several grid steps, on a chip: which `block_n` brings it near its floor.

Gate 04 judges the collective matmul's overlap against its compute alone (the same kernel on one chip,
the whole x by one chip's columns of w), and the compute alone must itself be within 1.5x of its
roofline floor. On a v5e at commit 9d5589b it took 152.5 us, 1.75x its 87.2 us floor, with 4096
columns a grid step (chapter 14's README, "Gate 04's size"). This script times the shipped solution's
compute alone at each `--blocks` value of its module's BLOCK_N (the widest step `block_n` may choose),
beside XLA's matmul of the same shapes, in the gates' own harness (device time from the profiler's
trace, interleaved rounds), and checks every output against XLA's first. Lines go to --out.

    python bench/collective_blocks.py --out /tmp/blocks.jsonl                 on a TPU (gate 04's size)
    python bench/collective_blocks.py --tiny --out /tmp/blocks.jsonl          on a CPU: interpret mode,
                                                                             small shapes, wall clock
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_tpucourse import references, roofline, strategies  # noqa: E402
from pytest_tpucourse.gates import sampling, timer  # noqa: E402

M, K, N_SHARD = 1024, 512, 16384  # gate 04's x whole and one chip's columns of w (exercises/ch14/test_gate04.py)
TINY = (64, 128, 1024)


def solution_module():
    """solutions/ch14/collective_matmul.py as a module of its own (its BLOCK_N is set per run)."""
    path = REPO / "solutions" / "ch14" / "collective_matmul.py"
    spec = importlib.util.spec_from_file_location("collective_matmul_blocks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--tiny", action="store_true", help="small shapes under TPU interpret mode (a CPU)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    m, k, n = TINY if args.tiny else (M, K, N_SHARD)
    if args.tiny:
        from jax.experimental.pallas import tpu as pltpu

        pltpu.set_tpu_interpret_mode(pltpu.InterpretParams())
    module = solution_module()
    one = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1], axis_types=(jax.sharding.AxisType.Auto,))
    seeds = sampling.draw_seeds(sampling.INPUT_SETS)
    sets = [(strategies.timed_input((m, k), "bfloat16", 2 * s), strategies.timed_input((k, n), "bfloat16", 2 * s + 1))
            for s in seeds]
    fns, steps = {}, {}
    for block in args.blocks:  # each traced (its first call) while BLOCK_N is its value
        module.BLOCK_N = block
        label = f"block_n {block}"
        steps[label] = module.block_n(n)
        fns[label] = jax.jit(functools.partial(module.all_gather_matmul, mesh=one, axis_name="x"))
        jax.block_until_ready(fns[label](*sets[0]))
    floor = jax.jit(functools.partial(references.ALL_GATHER_MATMUL.floor, mesh=one, axis_name="x"))
    expected = [floor(*a) for a in sets]
    wrong = {label: why for label, fn in fns.items()
             if (why := sampling.wrong_output(label, fn, sets, expected, "bfloat16"))}
    timed = {label: fn for label, fn in fns.items() if label not in wrong}
    platform = jax.devices()[0].platform
    timings = timer.harness_for(platform).measure({"xla": floor, **timed}, sets)
    predicted = roofline.predict(_chip(), roofline.matmul_cost(m, k, n, "bfloat16"), "bfloat16").floor_seconds
    common = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  device_kind=jax.devices()[0].device_kind, jax=jax.__version__, shapes=[[m, k], [k, n]],
                  dtype="bfloat16", floor_us=predicted * 1e6, tiny=args.tiny)
    with args.out.open("a", encoding="utf-8") as out:
        for label, t in timings.items():
            line = dict(common, config=label, columns_a_step=steps.get(label), median_us=t.summary.median * 1e6,
                        ratio_to_floor=t.summary.median / predicted, method=t.method, rounds=len(t.samples))
            out.write(json.dumps(line) + "\n")
            print(f"{label:>24}: {t.summary.median * 1e6:9.1f} us, {t.summary.median / predicted:5.2f}x the floor"
                  + (f" ({steps[label]} columns a step)" if label in steps else ""))
        for label, why in wrong.items():
            out.write(json.dumps(dict(common, config=label, error=why)) + "\n")
            print(f"{label:>24}: {why}")
    return 0


def _chip():
    from pytest_tpucourse import chips

    return chips.get_chip("v5e").per_device()


if __name__ == "__main__":
    sys.exit(main())
