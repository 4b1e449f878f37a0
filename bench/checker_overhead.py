"""What the shared checker costs on top of running the kernel and the reference.

    python bench/checker_overhead.py

For each chapter-11 kernel at a graded shape, over repeated checks (after a
warm-up that pays the first compiles), the median of
  checker    checks.assert_matches_reference end to end (anti-cheat trace,
             kernel, floor, oracle, comparison);
  kernel     the time spent inside the kernel call, timed within that same check
             (a pallas_call called eagerly is traced again on every call, so
             separate runs of the kernel vary too much to subtract);
  reference  the float64 oracle and the XLA floor, timed on their own;
overhead = checker - kernel - reference, as a share of the checker's time.
Under TPU interpret mode on this CPU: a cost of grading, not of any kernel on a TPU.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import checks, references
from pytest_tpucourse.grading import backend
from pytest_tpucourse.grading.calls import GradedFunction
from pytest_tpucourse import strategies as tst

REPO = Path(__file__).resolve().parents[1]
REPEATS = 7


class TimedFunction(GradedFunction):
    """A graded function that adds up the time spent in its calls."""

    spent = 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            self.spent += time.perf_counter() - start


def _solution(module: str, function: str):
    spec = importlib.util.spec_from_file_location(f"solution_{module}", REPO / "solutions/ch11" / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return TimedFunction(getattr(loaded, function), f"{function}()")


def _median_seconds(action, fn=None) -> tuple[float, float]:
    """Median seconds of action(), and of the time fn spent inside it."""
    action()  # warm-up: compiles
    times, inside = [], []
    for _ in range(REPEATS):
        before = fn.spent if fn is not None else 0.0
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
        inside.append((fn.spent - before) if fn is not None else 0.0)
    return statistics.median(times), statistics.median(inside)


def cases():
    x = tst.random_array((256, 512), "bfloat16", 0)
    y = tst.random_array((512, 384), "bfloat16", 1)
    yield "matmul 256x512x384 bf16", _solution("matmul", "matmul"), (x, y), {}, references.MATMUL
    s = tst.random_array((64, 256), "float32", 0)
    yield "softmax 64x256 f32", _solution("softmax", "softmax"), (s,), {"block_rows": 16}, references.SOFTMAX
    a = tst.random_array((512, 1024), "float32", 0)
    yield "add 512x1024 f32", _solution("elementwise_add", "add"), (a, a), {}, references.ADD


def main() -> None:
    pltpu.set_tpu_interpret_mode(backend.tpu_interpret_params())
    print(f"median of {REPEATS} after a warm-up; jax {jax.__version__}, TPU interpret mode, "
          f"{jax.default_backend()}")
    print()
    print("| case | kernel | reference (oracle + floor) | checker, end to end | overhead |")
    print("|---|---|---|---|---|")
    for name, fn, args, kwargs, reference in cases():
        def reference_only():
            with jax.enable_x64(True):
                jax.block_until_ready(reference.oracle(*[np.asarray(a, np.float64) for a in args]))
            jax.block_until_ready(reference.floor(*args))

        ref, _ = _median_seconds(reference_only)
        total, kernel = _median_seconds(lambda: checks.assert_matches_reference(
            fn, args, kwargs=kwargs, reference=reference), fn)
        overhead = total - kernel - ref
        print(f"| {name} | {kernel * 1e3:.1f} ms | {ref * 1e3:.1f} ms | {total * 1e3:.1f} ms | "
              f"{overhead * 1e3:.1f} ms ({100 * overhead / total:.0f}%) |", flush=True)


if __name__ == "__main__":
    main()
