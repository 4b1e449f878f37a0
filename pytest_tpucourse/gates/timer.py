"""Timing on hardware with pytest-benchmark's fixture.

Pedantic mode: every call waits with block_until_ready, each input set is called
once first so compilation is never timed, and the rounds rotate through several
input sets so no cache flatters a repeat. The result is the median and the
interquartile range.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

ROUNDS = 30


@dataclass(frozen=True)
class Stats:
    median: float  # seconds
    iqr: float  # seconds
    rounds: int


class BenchmarkTimer:
    """Times with pytest-benchmark's `benchmark` fixture (one target per test)."""

    def __init__(self, benchmark):
        self.benchmark = benchmark

    def measure(self, fn, input_sets, rounds: int = ROUNDS) -> Stats:
        import jax

        for args in input_sets:  # compile and warm every input set outside the timing
            jax.block_until_ready(fn(*args))
        cycle = itertools.cycle(input_sets)
        self.benchmark.pedantic(
            lambda *args: jax.block_until_ready(fn(*args)),
            setup=lambda: (next(cycle), {}), rounds=rounds, iterations=1, warmup_rounds=1,
        )
        stats = self.benchmark.stats
        if stats is None:
            raise RuntimeError("pytest-benchmark timed nothing: benchmarks are disabled "
                               "(--benchmark-disable or --benchmark-skip); gate timings need them on")
        return Stats(median=stats.stats.median, iqr=stats.stats.iqr, rounds=stats.stats.rounds)


def labelled_benchmark(request, label: str):
    """Another pytest-benchmark fixture for the same test, named `test[label]`.

    pytest-benchmark's fixture times one target per test; a trio times three. Each
    extra one is built like pytest-benchmark's own fixture and reports into the same
    session, so the terminal table and --benchmark-json carry all three.
    """
    from pytest_benchmark.fixture import BenchmarkFixture
    from pytest_benchmark.utils import NameWrapper

    session = request.config._benchmarksession
    if session.skip:
        pytest.skip("Benchmarks are skipped (--benchmark-skip was used).")
    node = request.node
    marker = node.get_closest_marker("benchmark")
    options = dict(marker.kwargs) if marker else {}
    if "timer" in options:
        options["timer"] = NameWrapper(options["timer"])
    options.setdefault("group", node.name)
    fixture = BenchmarkFixture(node, add_stats=session.benchmarks.append, logger=session.logger,
                               warner=node.warn, disabled=session.disabled, **dict(session.options, **options))
    fixture.name, fixture.fullname = f"{node.name}[{label}]", f"{node.nodeid}[{label}]"
    request.addfinalizer(fixture._cleanup)
    return fixture
