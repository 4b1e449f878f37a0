"""The course's command-line options (`pytest --help`, group "tpucourse"); RunOptions reads them."""

from __future__ import annotations

import importlib.util

import pytest

from .. import chips
from ..grading import backend
from ..grading.deadline import DEFAULT_SECONDS


def add_options(parser: pytest.Parser) -> None:
    """The course's options, in one group of `pytest --help`."""
    group = parser.getgroup("tpucourse", "TPU kernel course")
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
        "quicker, but blind to grid-order, uninitialised-memory and out-of-bounds bugs)",
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
    if importlib.util.find_spec("xdist") is None:  # say what -n needs instead of "unrecognized arguments"
        group.addoption("-n", "--numprocesses", dest="tpucourse_numprocesses", default=None,
                        help="needs pytest-xdist: pip install pytest-xdist (or pip install -e '.[test]')")
