"""How a small XLA program's time depends on how it is timed, on a chip: one call and its sync, N calls per
sync from Python, and N steps of a device-side `lax.fori_loop` (inputs and the output carried through
`lax.optimization_barrier`, an empty loop's time taken off). docs/gates.md ("Device time") and chapter 10
quote what it printed on a v5e (bench/tpu/timing_methods.json); the gates themselves time by the
profiler's device trace (gates/timer.py), which this script does not use.

    python bench/timing_methods.py [--out FILE]        on a TPU (or any backend: the numbers are that backend's)
"""

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def device_loop(fn, args, n):
    """A jitted fori_loop of n calls of fn, inputs and the last output through an optimization barrier."""
    out0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))

    def body(i, carry):
        a, o = lax.optimization_barrier(carry)
        return (a, fn(*a))

    def empty_body(i, carry):
        return lax.optimization_barrier(carry)
    run = jax.jit(lambda a, o: lax.fori_loop(0, n, body, (a, o))[1])
    empty = jax.jit(lambda a, o: lax.fori_loop(0, n, empty_body, (a, o))[1])
    return run, empty, out0


def time_device(fn, args, target=0.03, samples=5):
    """seconds per call of fn on the device: loop of n minus an empty loop of n, median of samples."""
    fn1 = jax.jit(fn)
    jax.block_until_ready(fn1(*args))
    t = time.perf_counter(); jax.block_until_ready(fn1(*args)); one = time.perf_counter() - t
    n = int(max(2, min(2000, target / max(one, 1e-6))))
    run, empty, out0 = device_loop(fn, args, n)
    jax.block_until_ready(run(args, out0)); jax.block_until_ready(empty(args, out0))
    per = []
    base = []
    for _ in range(samples):
        t = time.perf_counter(); jax.block_until_ready(empty(args, out0)); e = time.perf_counter() - t
        t = time.perf_counter(); jax.block_until_ready(run(args, out0)); r = time.perf_counter() - t
        per.append((r - e) / n); base.append(e)
    # if single call was way shorter, re-estimate n
    return dict(per_call_us=float(np.median(per)) * 1e6, n=n, empty_loop_ms=float(np.median(base)) * 1e3,
                one_call_with_sync_us=one * 1e6, spread=[round(p * 1e6, 2) for p in per])


def time_calls(fn, args, n=200, samples=5):
    f = jax.jit(fn)
    jax.block_until_ready(f(*args))
    per = []
    for _ in range(samples):
        t = time.perf_counter()
        o = None
        for _ in range(n):
            o = f(*args)
        jax.block_until_ready(o)
        per.append((time.perf_counter() - t) / n)
    return float(np.median(per)) * 1e6


def rnd(shape, dtype, seed):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    bf = jnp.bfloat16
    cases = {
        "xla_matmul_4096": (lambda x, w: x @ w, (rnd((4096, 4096), bf, 1), rnd((4096, 4096), bf, 2))),
        "xla_skinny_8x4096x4096": (lambda x, w: x @ w, (rnd((8, 4096), bf, 1), rnd((4096, 4096), bf, 2))),
        "xla_add_4096": (lambda x, y: x + y, (rnd((4096, 4096), bf, 1), rnd((4096, 4096), bf, 2))),
    }
    out = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__}
    for name, (fn, inputs) in cases.items():
        out[name] = dict(device=time_device(fn, inputs), calls_us=time_calls(fn, inputs))
        print(name, out[name], flush=True)
    if args.out:
        with open(args.out, "w") as file:
            json.dump(out, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
