"""Chapter 11's matmul and fused matmul + bias + GELU on a chip, by block size and schedule, timed by the
gates' own harness (pytest_tpucourse/gates/timer.py: device time from the profiler's trace, every
configuration interleaved with XLA's in the same rounds).

    python bench/matmul_sweep.py --out bench/tpu/matmul_sweep.json     on a TPU
    python bench/matmul_sweep.py --dry-run                             any machine: small, interpret mode

Two schedules of the same kernel (solutions/ch11/matmul.py's is the second):
  - "zeroed": the accumulator zeroed on the first k step, `acc += x @ y` on every step, the output
    written from the accumulator after the last (chapter 11's first version);
  - "assigned": the first k step assigns its product to the accumulator, the last adds its product
    to the accumulator on the way to the output (no zeroing pass, no last store of the accumulator).
Blocks past the 16 MiB default scoped VMEM of a v5e raise `vmem_limit_bytes` to what they need.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BLOCKS = [(512, 512, 512), (1024, 512, 1024), (1024, 1024, 1024), (2048, 512, 1024), (1024, 512, 2048),
          (2048, 1024, 1024), (1024, 2048, 1024)]
SMALL = [(128, 128, 128), (256, 128, 256)]


def vmem_needed(bm: int, bk: int, bn: int, itemsize: int) -> int:
    """Double-buffered x, y and output blocks, the f32 accumulator and one f32 product, in bytes."""
    return 2 * (bm * bk + bk * bn + bm * bn) * itemsize + 2 * 4 * bm * bn


def _kernel(x_ref, y_ref, *rest, schedule: str, steps: int, epilogue):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    *b_ref, o_ref, acc_ref = rest
    k = pl.program_id(2)

    def product():  # in each branch: the MXU's result goes straight into its consumer
        return jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    def finish(z):
        if b_ref:
            z = epilogue(z + b_ref[0][...].astype(jnp.float32))
        o_ref[...] = z.astype(o_ref.dtype)

    if schedule == "zeroed":
        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += product()

        @pl.when(k == steps - 1)
        def _():
            finish(acc_ref[...])
        return
    if steps == 1:
        finish(product())
        return

    @pl.when(k == 0)
    def _():
        acc_ref[...] = product()

    @pl.when((k > 0) & (k < steps - 1))
    def _():
        acc_ref[...] += product()

    @pl.when(k == steps - 1)
    def _():
        finish(acc_ref[...] + product())


def matmul(x, y, b=None, *, bm, bk, bn, schedule="assigned", epilogue=None):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    (m, k), (_, n) = x.shape, y.shape
    bm, bk, bn = min(bm, m), min(bk, k), min(bn, n)
    steps = k // bk
    needed = vmem_needed(bm, bk, bn, x.dtype.itemsize)
    params = dict(dimension_semantics=("parallel", "parallel", "arbitrary"))
    if needed > 12 * 2**20:  # the default scoped limit is 16 MiB; a v5e core has 128
        params["vmem_limit_bytes"] = min(int(needed * 1.5), 100 * 2**20)
    in_specs = [pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))]
    args = [x, y]
    if b is not None:
        in_specs.append(pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)))
        args.append(b.reshape(1, n))
    return pl.pallas_call(
        functools.partial(_kernel, schedule=schedule, steps=steps, epilogue=epilogue),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, steps),
        in_specs=in_specs, out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(**params), interpret=jax.default_backend() != "tpu",
    )(*args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing rounds per group")
    args = parser.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from pytest_tpucourse import references
    from pytest_tpucourse.gates import timer
    from pytest_tpucourse.strategies import random_array

    on_tpu = jax.default_backend() == "tpu"
    size = 4096 if not args.dry_run else 256
    blocks = BLOCKS if not args.dry_run else SMALL
    harness = timer.Harness(device_clock=timer.ProfilerDeviceClock() if on_tpu else None, budget=args.budget,
                            min_rounds=5 if args.dry_run else None, max_rounds=5 if args.dry_run else None)
    x, y = random_array((size, size), "bfloat16", 1), random_array((size, size), "bfloat16", 2)
    b = random_array((size,), "bfloat16", 3)
    gelu = references.ACTIVATIONS["gelu"]
    xla = jax.jit(references.matmul_floor)
    add_bias = jax.jit(lambda h, b: (h.astype("float32") + b.astype("float32")).astype(h.dtype))
    act = jax.jit(lambda z: gelu(z.astype("float32")).astype(z.dtype))
    groups = {"matmul": ({"xla": xla}, (x, y)),
              "fused": ({"xla-unfused": lambda x, y, b: act(add_bias(xla(x, y), b))}, (x, y, b))}
    for bm, bk, bn in blocks:
        for schedule in ("zeroed", "assigned"):
            name = f"{schedule} {bm}x{bk}x{bn}"
            groups["matmul"][0][name] = jax.jit(functools.partial(matmul, bm=bm, bk=bk, bn=bn, schedule=schedule))
            groups["fused"][0][name] = jax.jit(functools.partial(matmul, bm=bm, bk=bk, bn=bn, schedule=schedule,
                                                                 epilogue=gelu))
    figures = {}
    for group, (fns, inputs) in groups.items():
        want = fns[next(iter(fns))](*inputs)
        usable = {}
        for name, fn in fns.items():  # each configuration checked against XLA's once, before timing
            try:
                got = fn(*inputs)
                error = float(jnp.linalg.norm((got.astype("float32") - want.astype("float32")))
                              / jnp.linalg.norm(want.astype("float32")))
                if error > 1e-2:
                    figures[f"{group} {name}"] = f"wrong: relative difference {error:.2e} from XLA"
                    continue
                usable[name] = fn
            except Exception as error:  # noqa: BLE001 - a refused configuration is a finding
                figures[f"{group} {name}"] = f"refused: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
        timings = harness.measure(usable, [inputs])
        base = timings[next(iter(usable))].summary.median
        for name, timing in timings.items():
            figures[f"{group} {name}"] = {"us": round(timing.summary.median * 1e6, 1),
                                          "ratio_to_xla": round(timing.summary.median / base, 3),
                                          "method": timing.method, "rounds": timing.summary.rounds}
            print(f"{group:7s} {name:26s} {timing.summary.median * 1e6:9.1f} us  {timing.summary.median / base:6.3f}x "
                  f"({timing.method}, {timing.summary.rounds} rounds)", flush=True)
    for key, value in figures.items():
        if isinstance(value, str):
            print(f"{key:34s} {value}")
    if args.out and not args.dry_run:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "what": f"bf16 {size}^3 matmul and gelu(x @ w + b), device time per call (gates' harness), "
                    f"interleaved with XLA's", "command": "python bench/matmul_sweep.py",
            "date": datetime.date.today().isoformat(), "device_kind": jax.devices()[0].device_kind,
            "jax": jax.__version__, "figures": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
