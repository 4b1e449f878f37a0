"""Timing on hardware, and the gate test's one object for writing honest rows.

A gate test asks for the `gate_run` fixture. On an accelerator it times the target
with pytest-benchmark's fixture (pedantic mode: every call waits with
block_until_ready, each input set is called once first so compilation is never
timed, the rounds rotate through several input sets so no cache flatters a
repeat) and writes a measured row with the median and interquartile range. On a
CPU nothing is timed: it writes the roofline prediction for the chip and the test
is skipped as awaiting hardware.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import chips, gates
from . import records as rec
from .roofline import Cost, predict

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
            raise RuntimeError("pytest-benchmark timed nothing (is --benchmark-disable set?)")
        return Stats(median=stats.stats.median, iqr=stats.stats.iqr, rounds=stats.stats.rounds)


@dataclass(frozen=True)
class Provenance:
    """Where and with what a row was produced."""

    platform: str
    device_kind: str
    jax: str
    jaxlib: str
    libtpu: str | None
    git_commit: str | None
    host: str


def provenance(platform: str, device_kind: str, root: Path) -> Provenance:
    import jax
    import jaxlib

    return Provenance(platform=platform, device_kind=device_kind, jax=jax.__version__,
                      jaxlib=jaxlib.__version__, libtpu=_libtpu_version(),
                      git_commit=_git_commit(root), host=socket.gethostname())


class GateRun:
    """Writes the rows of one gate test; judges measured ones by the gate's criterion."""

    def __init__(self, *, gate: int, chapter: str, test_id: str, chip: chips.Chip,
                 on_accelerator: bool, provenance: Provenance, records_path: Path, timer_factory):
        self.gate = gates.gate(gate)
        self.chapter = chapter
        self.test_id = test_id
        self.chip = chip
        self.on_accelerator = on_accelerator
        self.provenance = provenance
        self.records_path = Path(records_path)
        self._timer_factory = timer_factory

    def _record(self, **fields) -> rec.Record:
        p = self.provenance
        row = rec.Record(gate=self.gate.number, chapter=self.chapter, test_id=self.test_id,
                         chip=self.chip.name, platform=p.platform, device_kind=p.device_kind,
                         jax=p.jax, jaxlib=p.jaxlib, libtpu=p.libtpu, git_commit=p.git_commit,
                         host=p.host, **fields)
        rec.append(self.records_path, row)
        return row

    def predict(self, criterion: str, op: str, shapes, dtype: str, cost: Cost) -> rec.Record | None:
        """Write the roofline floor for this chip, unless the same prediction already holds the slot."""
        self.gate.criterion(criterion)
        floor = predict(self.chip.per_device(), cost).floor_seconds
        slot = (self.gate.number, criterion, op, tuple(map(tuple, shapes)), dtype, self.chip.name, "floor")
        held = [r for r in rec.current(rec.read(self.records_path)) if r.slot == slot]
        if held and held[0].method == "roofline-predicted" and held[0].value == floor:
            return None
        return self._record(criterion=criterion, implementation="floor", op=op, shapes=shapes,
                            dtype=dtype, method="roofline-predicted", statistic="floor", value=floor,
                            unit="s", verdict="pending", interpret=False,
                            notes=f"{predict(self.chip.per_device(), cost).bound}-bound")

    def measure_floor(self, criterion: str, op: str, shapes, dtype: str, cost: Cost, fn, input_sets):
        """Gate 0: time XLA's op and judge it against its roofline floor on this chip.

        On a CPU: writes the prediction and skips the test (awaiting hardware).
        """
        c = self.gate.criterion(criterion)
        self.predict(criterion, op, shapes, dtype, cost)
        if not self.on_accelerator:
            pytest.skip(f"awaiting hardware: {op} {dtype} roofline floor predicted for {self.chip.name}; "
                        f"nothing is timed off-chip")
        floor = predict(self.chip.per_device(), cost).floor_seconds
        stats = self._timer_factory().measure(fn, input_sets)
        ratio = stats.median / floor
        verdict = c.judge(ratio)
        self._record(criterion=criterion, implementation="floor", op=op, shapes=shapes, dtype=dtype,
                     method="measured", statistic="median", value=stats.median, unit="s",
                     spread=stats.iqr, ratio_to_floor=ratio, verdict=verdict, interpret=False,
                     notes=f"{stats.rounds} rounds over {len(input_sets)} input sets")
        if verdict == gates.FAIL:
            low, high = c.ratio_range
            pytest.fail(f"{op} {dtype} {shapes} on {self.chip.name}: measured {stats.median * 1e6:.1f} us "
                        f"is {ratio:.2f}x its roofline floor {floor * 1e6:.1f} us, outside "
                        f"[{low}, {high}]", pytrace=False)
        return stats


def _libtpu_version() -> str | None:
    from importlib import metadata

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@dataclass(frozen=True)
class GateContext:
    """What every gate test of a run shares: the chip, the device, where rows go."""

    registry: chips.ChipRegistry
    chip: chips.Chip | None  # None: an accelerator we have no figures for, gates not asked for
    platform: str
    device_kind: str
    records_path: Path
    root: Path

    @property
    def on_accelerator(self) -> bool:
        return self.platform in rec.ACCELERATORS

    def run_for(self, *, gate: int, chapter: str, test_id: str, timer_factory) -> GateRun:
        if self.chip is None:
            raise pytest.UsageError(f"{test_id}: no chip for gate records: pass --chip")
        return GateRun(gate=gate, chapter=chapter, test_id=test_id, chip=self.chip,
                       on_accelerator=self.on_accelerator,
                       provenance=provenance(self.platform, self.device_kind, self.root),
                       records_path=self.records_path, timer_factory=timer_factory)


def gate_context(registry: chips.ChipRegistry, requested: str | None, platform: str, device_kind: str,
                 records_path: Path, root: Path, *, strict: bool) -> GateContext:
    """Resolve the run's chip. strict: a chip that cannot be named for this device is an error."""
    try:
        name = chips.chip_for_run(requested, platform, device_kind, registry)
    except chips.ChipMismatch:
        if strict:
            raise
        name = None
    if name is None and platform == "cpu":
        name = chips.DEFAULT_PREDICTION_CHIP
    return GateContext(registry=registry, chip=registry.get(name) if name else None, platform=platform,
                       device_kind=device_kind, records_path=records_path, root=root)
