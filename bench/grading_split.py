"""Where a grading run's time goes, test by test: XLA compiles of kernel programs (programs with
host callbacks), other XLA compiles (the checker's oracles and floors, graded pure JAX), and
JAX lowering them. The rest of a test's time is tracing, running (interpreting) and checking.

    python bench/grading_split.py exercises/ch13 --solutions --jax-cache /tmp/empty   # cold
    python bench/grading_split.py exercises/ch11 --solutions                          # re-run

Arguments are pytest's. Prints the 30 slowest tests and the totals over all of them. This
measures the grader on this machine, not any kernel's speed on a TPU.
"""

from __future__ import annotations

import collections
import sys
import time

import pytest
from jax._src import compiler
from jax._src.interpreters import mlir

_test = ["(collection)"]
_split: dict = collections.defaultdict(collections.Counter)


def _timed(module, name: str, label):
    original = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            kind = label(args)
            _split[_test[0]][kind] += 1
            _split[_test[0]][kind + " s"] += time.perf_counter() - start

    setattr(module, name, timed)


class _PerTest:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        _test[0] = item.nodeid.split("::", 1)[-1]
        start = time.perf_counter()
        try:
            return (yield)
        finally:
            _split[_test[0]]["test s"] += time.perf_counter() - start


def main() -> int:
    _timed(compiler, "backend_compile_and_load", lambda args: "kernel" if args[4] else "other")
    _timed(mlir, "lower_jaxpr_to_module", lambda args: "lowering")
    status = pytest.main(sys.argv[1:], plugins=[_PerTest()])
    columns = ("kernel", "other", "lowering")
    print(f"\n{'test':>7}  " + "  ".join(f"{c + ' (n, s)':>16}" for c in columns))
    totals = collections.Counter()
    for counts in _split.values():
        totals.update(counts)
    rows = sorted(_split.items(), key=lambda kv: -kv[1]["test s"])[:30] + [("all tests", totals)]
    for name, counts in rows:
        print(f"{counts['test s']:6.2f}s  " + "  ".join(f"{counts[c]:6d} {counts[c + ' s']:7.2f}s" for c in columns)
              + f"  {name}")
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
