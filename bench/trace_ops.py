"""What the gate harness reads off a chip's profiler trace, shown whole: the device plane's lines, the ops
inside each program with their kinds, and the harness's sizing of N, per-op breakdown and XLA's two input
regimes on XLA's 4096³ bf16 matmul, gate 03's forward ceiling (JAX's flash attention) and gate 05's splash
ceiling as pytest_tpucourse/public_kernels.py calls it. Nothing here is judged; it confirms on the chip what
the CPU tests of gates/timer.py and gates/device_ops.py take on trust (the "XLA Ops" line's name, that its
events are named as the compiled program's instructions, how long a measurement takes).

    python bench/trace_ops.py [--out bench/tpu/trace_ops.json]        on a TPU
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _trace_lines(work):
    """{plane: {line: [first events' (name, microseconds, stat names)]}} of the device planes of one trace."""
    from pytest_tpucourse.gates.timer import ProfilerDeviceClock

    profile = ProfilerDeviceClock._trace(work)
    if profile is None:
        return {}
    out = {}
    for plane in profile.planes:
        if plane.name.startswith("/device:"):
            out[plane.name] = {line.name: [(e.name, e.duration_ns / 1e3, [k for k, _ in e.stats][:8])
                                           for e in list(line.events)[:12]] for line in plane.lines}
    return out


def _one(label, fn, args, harness, weights=()):
    import jax

    from pytest_tpucourse.gates import device_ops, sampling

    jax.block_until_ready(fn(*args[0]))
    text = sampling.compiled_text(fn, args[0])
    known = device_ops.hlo_kinds(text) if text else {}
    fns = {label: fn}
    if weights:
        fns[label + " (weights fixed)"] = sampling.weights_fixed(fn, args[0], weights)
    start = time.perf_counter()
    timings = harness.measure(fns, args)
    seconds = time.perf_counter() - start
    return {
        "lines": _trace_lines(lambda: jax.block_until_ready(fn(*args[0]))),
        "cross_program_prefetch": bool(text) and device_ops.cross_program_prefetch(text),
        "measure_seconds": seconds,
        "timings": {name: {"median_us": t.summary.median * 1e6, "rounds": t.summary.rounds,
                           "calls_per_sample": t.calls_per_sample, "sized_by": t.sized_by, "traces": t.traces,
                           "method": t.method, "stopped": t.stopped,
                           "ops": device_ops.as_row(t.ops, known),
                           "beside_one_custom_call": device_ops.beside_one_custom_call(device_ops.as_row(t.ops, known))}
                    for name, t in timings.items()},
        "compiled_instructions": {k: v for k, v in known.items() if v != device_ops.OTHER},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "tpu" / "trace_ops.json")
    args = parser.parse_args(argv)

    import jax

    from pytest_tpucourse import public_kernels
    from pytest_tpucourse import strategies as tst
    from pytest_tpucourse.gates import timer

    harness = timer.harness_for(jax.devices()[0].platform)  # the gates' own harness: device time on a TPU
    seeds = (11, 12, 13)
    mat = [tuple(tst.random_array((4096, 4096), "bfloat16", seed=10 * s + j) for j in range(2)) for s in seeds]
    qkv = [tuple(tst.random_array((2, 16, 4096, 128), "bfloat16", seed=10 * s + j) for j in range(3)) for s in seeds]
    flash = jax.jit(functools.partial(public_kernels.flash_attention, causal=False, block_q=512, block_kv=1024))
    splash = jax.jit(functools.partial(public_kernels.splash_attention, causal=False))
    report = {"device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
              "xla matmul 4096": _one("xla matmul 4096", jax.jit(lambda x, w: x @ w), mat, harness, weights=(1,)),
              "flash forward (gate 03 ceiling)": _one("flash forward", flash, qkv, harness),
              "splash forward (gate 05 ceiling)": _one("splash forward", splash, qkv, harness)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    for name, found in report.items():
        if isinstance(found, dict):
            print(name, f"{found['measure_seconds']:.1f} s to measure;",
                  {k: (round(v["median_us"], 1), v["calls_per_sample"], v["sized_by"], v["traces"])
                   for k, v in found["timings"].items()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
