"""XLA's CPU compile of kernel programs under TPU interpret mode, with and without the compiler
options the plugin gives them (grading/compiled.py, KERNEL_PROGRAM_OPTIONS).

    python bench/compile_options.py              # 4 rounds, the three kernels below
    python bench/compile_options.py --rounds 6
    python bench/compile_options.py --per-fusion # what one fusion costs; fusions per kernel program

For each kernel of the shipped solutions (ch11 matmul; ch13 forward; ch13 VJP, three
kernels), each option set compiles a fresh program `--rounds` times: the median CPU seconds
of `.compile()` alone (traced and lowered before the clock starts), the median CPU seconds of
a call of the compiled program, and whether its result equals the default compile's bit for
bit (LLVM at -O0 may round differently; the checker's tolerance judges the values). Prints a
Markdown table for docs/speed.md. Nothing here is a kernel's speed on a TPU.

`--per-fusion`: the CPU seconds XLA takes to compile a program of 10 and of 30 loop fusions, each
read by a host callback as the interpreter's values are (the slope is what one fusion costs), with
XLA's defaults and with the options the plugin gives kernel programs; then, with those options,
the fusions in each kernel's program as a course session compiles it (grid orders computed ahead)
and how many of them hold only one op.
Run it with each JAX to compare them: jaxlib 0.12 compiles every fusion with its MLIR emitters.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def kernels():
    """(name, function, args) of the solutions' kernels, as the graded tests call them."""
    import importlib

    import jax
    import numpy as np

    package = types.ModuleType("bench_solutions")
    package.__path__ = [str(REPO / "solutions")]
    sys.modules["bench_solutions"] = package
    matmul = importlib.import_module("bench_solutions.ch11.matmul").matmul
    flash_forward = importlib.import_module("bench_solutions.ch13.forward").flash_forward
    flash_attention = importlib.import_module("bench_solutions.ch13.backward").flash_attention
    rng = np.random.default_rng(0)

    def array(*shape):
        return jax.numpy.asarray(rng.standard_normal(shape), jax.numpy.float32)

    x, y, q = array(128, 1024), array(1024, 128), array(1, 2, 256, 128)

    def vjp(q, k, v):
        out, pullback = jax.vjp(lambda *a: flash_attention(*a, causal=True), q, k, v)
        return pullback(out)

    return [
        ("ch11 matmul (128, 1024) x (1024, 128) f32, blocks 128", lambda a, b: matmul(a, b, bm=128, bk=128, bn=128), (x, y)),
        ("ch13 forward (1, 2, 256, 128) f32 causal", lambda a, b, c: flash_forward(a, b, c, causal=True), (q, q, q)),
        ("ch13 VJP (1, 2, 256, 128) f32 causal", vjp, (q, q, q)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-fusion", action="store_true",
                        help="what one fusion costs to compile, and the fusions of each kernel program")
    args = parser.parse_args()
    if args.per_fusion:
        per_fusion(max(args.rounds, 7))
        return

    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    from pytest_tpucourse.grading.compiled import kernel_program_options

    option_sets = {"XLA's defaults": None, "KERNEL_PROGRAM_OPTIONS (those XLA accepts)": kernel_program_options()}
    pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0))
    print(f"jax {jax.__version__}, TPU interpret mode, median of {args.rounds} rounds, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}")
    print()
    print("| kernel | options | compile (CPU) | call (CPU) | same bits |")
    print("|---|---|---|---|---|")
    for name, function, call_args in kernels():
        compiles = {label: [] for label in option_sets}
        calls = {label: [] for label in option_sets}
        results = {}
        for _ in range(args.rounds):
            for label, options in option_sets.items():
                lowered = jax.jit(lambda *a: function(*a), compiler_options=options).trace(*call_args).lower()
                start = time.process_time()
                executable = lowered.compile()
                compiles[label].append(time.process_time() - start)
                results[label] = jax.block_until_ready(executable(*call_args))
                start = time.process_time()
                jax.block_until_ready(executable(*call_args))
                calls[label].append(time.process_time() - start)
        reference = jax.tree.leaves(results["XLA's defaults"])
        for label in option_sets:
            same = all(np.array_equal(np.asarray(a), np.asarray(b))
                       for a, b in zip(reference, jax.tree.leaves(results[label])))
            print(f"| {name} | {label} | {statistics.median(compiles[label]):.2f} s | "
                  f"{statistics.median(calls[label]):.3f} s | {'yes' if same else 'no'} |", flush=True)


def _fusions_read_by_host_callbacks(count: int):
    """A program of `count` loop fusions, each read by a host callback (nothing fuses across one)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import io_callback

    def seen(block):
        return np.int32(block.shape[0])

    def program(x, scale):
        total = jnp.int32(0)
        for i in range(count):
            total = total + io_callback(seen, jax.ShapeDtypeStruct((), jnp.int32), (x * scale + i) > 0.5,
                                        ordered=True)
        return total

    return program, (jnp.zeros((64, 128), jnp.float32), jnp.float32(2))


def _median_compile_seconds(function, call_args, options, rounds: int) -> tuple[float, str]:
    """Median CPU seconds of `.compile()` of a fresh lowering, and the compiled program's HLO."""
    import jax

    seconds = []
    for _ in range(rounds):
        lowered = jax.jit(lambda *a: function(*a)).lower(*call_args)
        start = time.process_time()
        compiled = lowered.compile(compiler_options=options)
        seconds.append(time.process_time() - start)
    return statistics.median(seconds), compiled.as_text()


def per_fusion(rounds: int) -> None:
    import re

    import jax
    from jax.experimental.pallas import tpu as pltpu

    from pytest_tpucourse.core import jax_internals
    from pytest_tpucourse.grading.compiled import kernel_program_options

    options = kernel_program_options()
    print(f"jax {jax.__version__}, options {options}, median of {rounds} compiles (CPU), "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}")
    print()
    print("| program | fusions | compile (CPU), XLA's defaults | compile (CPU), the plugin's options |")
    print("|---|---|---|---|")
    measured = {}
    for count in (10, 30):
        program, call_args = _fusions_read_by_host_callbacks(count)
        for label, option_set in (("defaults", None), ("plugin", options)):
            measured[count, label], hlo = _median_compile_seconds(program, call_args, option_set, rounds)
        print(f"| {count} loop fusions, each read by a host callback | {hlo.count(' fusion(')} | "
              f"{measured[count, 'defaults'] * 1000:.1f} ms | {measured[count, 'plugin'] * 1000:.1f} ms |",
              flush=True)
    slopes = [(measured[30, label] - measured[10, label]) / 20 * 1000 for label in ("defaults", "plugin")]
    print(f"| one fusion more (slope) | | {slopes[0]:.2f} ms | {slopes[1]:.2f} ms |")
    print()
    jax_internals.grid_orders_computed_ahead()
    pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0))
    print("| kernel program (interpret mode) | fusions | of one op | while loops | compile (CPU) |")
    print("|---|---|---|---|---|")
    for name, function, call_args in kernels():
        seconds, hlo = _median_compile_seconds(function, call_args, options, max(3, rounds // 2))
        fusions = hlo.count(" fusion(")
        lone = len(re.findall(r" fusion\([^\n]*calls=%wrapped_", hlo))
        print(f"| {name} | {fusions} | {lone} | {hlo.count(' while(')} | {seconds:.3f} s |", flush=True)


if __name__ == "__main__":
    main()
