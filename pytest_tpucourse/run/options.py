"""The course's command-line options (`pytest --help`, group "tpucourse"), and RunOptions, which
reads and checks them once in every run, inside a course checkout or not."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from .. import chips
from . import hookspecs, registered_chips
from ..grading import backend
from ..grading.deadline import DEFAULT_SECONDS

OPTIONS = pytest.StashKey["RunOptions"]()


HOST_CPU_CHILD = "--tpucourse-host-cpu"
HOST_CPU_CHILD_DEST = "tpucourse_host_cpu"
XDIST_MISSING = ("-n runs the tests in parallel with pytest-xdist, which is not installed: "
                 "pip install pytest-xdist (or, in the course checkout, pip install -e '.[test]')")


def refuse_numprocesses_without_xdist(args: list[str]) -> None:
    """`-n N` with pytest-xdist missing: one line saying what to install.

    pytest reserves lowercase short options for itself (a plugin's `-n` raises ValueError when
    pytest starts, which stopped every command on a machine without xdist), so the course reads the
    arguments instead of registering the option. Runs before argument parsing, where pytest would
    only say "unrecognized arguments".
    """
    if importlib.util.find_spec("xdist") is not None:
        return
    for arg in args:
        if arg == "--":
            break
        if arg in ("-n", "--numprocesses") or arg.startswith("--numprocesses=") or re.fullmatch(r"-n\S+", arg):
            raise pytest.UsageError(XDIST_MISSING)


def add_options(parser: pytest.Parser) -> None:
    """The course's options, in one group of `pytest --help`."""
    group = parser.getgroup("tpucourse", "TPU kernel course")
    # a run's host-CPU half (run/host_cpu.py): the file this child appends its reports to
    group.addoption(HOST_CPU_CHILD, dest=HOST_CPU_CHILD_DEST, metavar="FILE", default=None,
                    help="(the course's own) the file a host-CPU part of a run on a TPU appends its reports to")
    group.addoption(
        "--solutions", action="store_true", default=False,
        help="grade the shipped reference solutions (solutions/) instead of exercises/",
    )
    group.addoption(
        "--impl-root", metavar="DIR", default=None,
        help="grade the tree at DIR, laid out like solutions/ (DIR/chNN/<module>.py)",
    )
    group.addoption(
        "--interpret", choices=backend.INTERPRET_MODES, default="auto",
        help="how kernels run: auto (native on a TPU, TPU interpret mode elsewhere; "
        "default), tpu (TPU interpret mode everywhere), fast (generic interpreter: "
        "quicker; it poisons uninitialised floats with NaN too, but is blind to grid-order and "
        "out-of-bounds bugs)",
    )
    group.addoption(
        "--jax-cache", metavar="DIR", default=".tpucourse/jax-cache",
        help="keep compiled XLA programs in DIR (relative to the course root) across runs; "
        "'none' turns it off (default: .tpucourse/jax-cache)",
    )
    group.addoption(
        "--gates", action="store_true", default=False,
        help="run only the @gate tests of the selected chapters",
    )
    group.addoption(
        "--rehearse", action="store_true", default=False,
        help="with --gates: every gate test's measuring path as on the chip, on a stand-in clock (rows thrown away)",
    )
    group.addoption(
        "--resweep", action="store_true", default=False,
        help="with --gates: sweep every ceiling's block sizes again instead of timing the best one an earlier "
        "run on this chip kept (.tpucourse/ceiling-sweeps.jsonl)",
    )
    group.addoption(
        "--finish-searches", action="store_true", default=False,
        help="with --gates: a kept ceiling search that spent its budget with a neighbour of its choice untried "
        "continues from its choice, with a budget of its own (finished searches are reused as they are)",
    )
    group.addoption(
        "--chip", metavar="NAME", default=None,
        help=f"chip the gate predictions and records are for ({', '.join(chips.KNOWN_CHIPS)}, or one "
        "a plugin registers); on an accelerator it must be the chip the run executes on",
    )
    group.addoption(
        "--kernel-timeout", metavar="SECONDS", type=float, default=DEFAULT_SECONDS,
        help=f"deadline for each call into the graded code (default {DEFAULT_SECONDS:g}; 0: none): "
        "a kernel that hangs (a wait nothing signals, an endless loop) fails its test instead",
    )
    group.addoption(
        "--cpu-devices", metavar="N", type=int, default=backend.DEFAULT_CPU_DEVICES,
        help=f"CPU devices JAX simulates when no accelerator runs the tests, for the multi-device "
        f"exercises (default {backend.DEFAULT_CPU_DEVICES}); on a TPU the real devices are used",
    )
    group.addoption(
        "--records", metavar="PATH", default=None,
        help="gate records file to append to (default: .tpucourse/records.jsonl in the course checkout, "
        "not tracked; bench/records.jsonl takes only --solutions rows)",
    )
    group.addoption(
        "--device-runs", metavar="PATH", default=None,
        help="where a gate run of the solutions on an accelerator adds its line (default: bench/device_runs.jsonl "
        "in the course checkout; 'none': nowhere)",
    )
    group.addoption(
        "--tpucourse-results", metavar="FILE", default=None,
        help="write this run's end-of-run record to FILE (each exercise's counts, seconds and first "
        "failure), as its last step; `tpucourse grade` reads it (docs/grading.md)",
    )
    group.addoption(
        "--isolated", action="store_true", default=False,
        help="after the run, check again the values of every exercise that passed, as `tpucourse grade` "
        "does: on inputs drawn afresh, computed by a process that imports the graded tree and judged "
        "by one that never does; an exercise is done only where they agree (docs/grading.md)",
    )
    group.addoption(
        "--watch-run", metavar="TOKEN", default=None,
        help="(what `tpucourse watch` adds) run first the test an edit most likely broke and say its answer "
        "at once; keep the run's outcomes and times in .tpucourse/watch-history.json under TOKEN",
    )


@dataclass(frozen=True)
class RunOptions:
    """The plugin's options as given, checked where a run outside a course checks them too."""

    registry: chips.ChipRegistry  # the built-in chips and those plugins register
    chip: str | None  # --chip, normalised
    solutions: bool
    impl_root: str | None
    interpret: str
    jax_cache: str
    gates: bool
    kernel_timeout: float
    cpu_devices: int
    records: str | None
    hypothesis_profile: str | None
    rehearse: bool = False
    resweep: bool = False
    finish_searches: bool = False
    device_runs: str | None = None  # --device-runs: None for bench/device_runs.jsonl, "none" for nowhere

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunOptions:
        for plugin in config.pluginmanager.get_plugins():
            hookspecs.refuse_retired(plugin)
        registry = registered_chips.from_config(config)
        chip = config.getoption("chip")
        if chip is not None:
            try:
                chip = config.option.chip = chips.validate_chip(chip, registry.names)
            except ValueError as error:
                raise pytest.UsageError(f"--chip: {error}") from None
        solutions, impl_root = config.getoption("solutions"), config.getoption("impl_root")
        if solutions and impl_root:
            raise pytest.UsageError("--solutions and --impl-root choose the graded tree: give one")
        if impl_root is not None and not Path(impl_root).is_dir():
            raise pytest.UsageError(f"--impl-root: {impl_root} is not a directory")
        rehearse = config.getoption("rehearse")
        if rehearse and not config.getoption("gates"):
            raise pytest.UsageError("--rehearse rehearses the gate tests: give it with --gates")
        if rehearse and config.getoption("records"):
            raise pytest.UsageError("--rehearse writes its rows to a throwaway file of its own: leave out --records")
        resweep = config.getoption("resweep")
        if resweep and not config.getoption("gates"):
            raise pytest.UsageError("--resweep sweeps the gates' ceilings again: give it with --gates")
        finish = config.getoption("finish_searches")
        if finish and not config.getoption("gates"):
            raise pytest.UsageError("--finish-searches continues the gates' ceiling searches: give it with --gates")
        return cls(
            registry=registry, chip=chip, solutions=solutions, impl_root=impl_root,
            interpret=config.getoption("interpret"), jax_cache=config.getoption("jax_cache"),
            gates=config.getoption("gates"), kernel_timeout=config.getoption("kernel_timeout"),
            cpu_devices=config.getoption("cpu_devices"), records=config.getoption("records"),
            hypothesis_profile=config.getoption("hypothesis_profile", None), rehearse=rehearse, resweep=resweep,
            finish_searches=finish, device_runs=config.getoption("device_runs"),
        )

    @property
    def chip_required(self) -> bool:
        """Gate records asked for, or a chip named: a chip this device cannot be is an error."""
        return self.gates or self.chip is not None
