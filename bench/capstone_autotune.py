"""Chapter 15's autotuning pass on a TPU: sweep the worked capstone's block sizes at its targets.

    python bench/capstone_autotune.py [--tree solutions] [--steps fwd,fwd+bwd] [--rounds 20]

For each target of <tree>/ch15/capstone.toml, every candidate block size the tree's
autotune.candidates offers for the chip is timed by the gates' own harness (gates/timer.py: device
time from the profiler's trace, --rounds samples, the median), as gate 05 times the kernel, one JSON record per (target, configuration)
appended to bench/capstone_autotune.jsonl with the chip, dtype, shapes, method, date and
versions. The winners go to the tree's autotuning cache (autotune.write_cache), which
window_attention(blocks=None) reads at call time. Then, per target, the tuned configuration
against the default BlockSizes(): the speed-up, or where the tuned one does not beat it.

Refuses to run anywhere but a TPU: a time off the chip says nothing about the chip.
"""

import argparse
import datetime as dt
import importlib.util
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_tree(tree: Path):
    """The tree's ch15 package (forward, backward, autotune), imported by path."""
    spec = importlib.util.spec_from_file_location("capstone_tree", tree / "ch15" / "__init__.py",
                                                  submodule_search_locations=[str(tree / "ch15")])
    sys.modules["capstone_tree"] = importlib.util.module_from_spec(spec)
    return (importlib.import_module("capstone_tree.forward"), importlib.import_module("capstone_tree.backward"),
            importlib.import_module("capstone_tree.autotune"))


def main() -> int:
    import jax

    from pytest_tpucourse import chips, strategies
    from pytest_tpucourse.gates import timer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default="solutions", help="a tree laid out like solutions/")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "bench" / "capstone_autotune.jsonl"))
    args = parser.parse_args()
    device = jax.devices()[0]
    if device.platform != "tpu":
        print(f"capstone_autotune: this is a {device.platform} ({device.device_kind}); the sweep times "
              f"kernels and runs only on a TPU", file=sys.stderr)
        return 2
    chip = chips.chip_for_device(device.platform, device.device_kind)
    tree = (ROOT / args.tree).resolve()
    forward, backward, autotune = _load_tree(tree)
    manifest = tomllib.loads((tree / "ch15" / "capstone.toml").read_text())
    records, versions = [], dict(jax=jax.__version__, jaxlib=jax.lib.__version__)
    harness = timer.Harness(device_clock=timer.ProfilerDeviceClock(), min_rounds=args.rounds, max_rounds=args.rounds)

    def time_ms(problem, config):
        q, k, v = (strategies.random_array(s, problem["dtype"], seed=i)
                   for i, s in enumerate((problem["q_shape"], problem["k_shape"], problem["k_shape"])))
        blocks = forward.BlockSizes(**config)
        step = jax.jit(jax.grad(lambda q, k, v: backward.window_attention(
            q, k, v, window=problem["window"], blocks=blocks).astype("float32").sum(), argnums=(0, 1, 2)))
        # the gates' own harness (device time from the profiler's trace), as gate 05 times the kernel
        timing = harness.measure({"kernel": step}, [(q, k, v)])["kernel"]
        return timing.summary.median * 1e3

    problems = []
    for t in manifest["targets"]:
        shape = [t["batch"], t["heads"], t["seq"], t["head_dim"]]
        problems.append(dict(q_shape=shape, k_shape=shape, dtype=t["dtype"], window=t["options"]["window"]))
    records = autotune.sweep(problems, chip=chip, time_ms=time_ms)
    stamp = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    with open(args.out, "a", encoding="utf-8") as out:
        for r in records:
            out.write(json.dumps(dict(r, method="measured", statistic="median fwd+bwd", unit="ms",
                                      timed_by=timer.DEVICE_PROFILER,
                                      device_kind=device.device_kind, date=stamp, rounds=args.rounds,
                                      **versions)) + "\n")
    path = autotune.write_cache(records, tree / "ch15" / "autotuning", device.device_kind)
    print(f"{len(records)} records -> {args.out}; winners -> {path}")
    default = dict(block_q=forward.BlockSizes().block_q, block_kv=forward.BlockSizes().block_kv)
    for problem in problems:
        key = autotune.problem_key(problem["q_shape"], problem["k_shape"], problem["dtype"], problem["window"])
        best = autotune.winners(records)[key]
        tried = {json.dumps(r["config"], sort_keys=True): r["median_ms"] for r in records if r["problem"] == problem}
        t_best, t_default = tried[json.dumps(best, sort_keys=True)], tried.get(json.dumps(default, sort_keys=True))
        if t_default is None:
            print(f"{problem}: tuned {best} {t_best:.3f} ms; the default {default} is not a candidate here")
        elif best == default:
            print(f"{problem}: the default {default} is the fastest ({t_best:.3f} ms): tuning does not beat it")
        else:
            print(f"{problem}: tuned {best} {t_best:.3f} ms vs default {t_default:.3f} ms "
                  f"({t_default / t_best:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
