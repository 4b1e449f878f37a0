"""Which TPU interpret setting shows which DMA mistake: the table in exercises/ch06/README.md.

    python bench/dma_settings.py

Runs solutions/ch06/double_buffering.py and each of its DMA mutants (tests/mutants/ch06.toml)
on one input under the three settings the graded tests use (tpu_rules.DMA_SETTINGS) and
prints, per setting, the largest error against numpy, what the interpreter printed (a
semaphore still counting at kernel exit, a race) and whether the call hung (a 5 s
deadline). Off-chip, under interpret mode: it says nothing about a TPU's speed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MUTANTS = ("copy_never_waited", "read_before_wait", "waits_on_the_other_slot",
           "first_copy_never_started", "serial_pipeline")


def load(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outcome(module, x, setting: str) -> str:
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from pytest_tpucourse.core import jax_internals
    from pytest_tpucourse.checking import tpu_rules
    from pytest_tpucourse.grading import backend
    from pytest_tpucourse.grading.deadline import Deadline, DeadlineExceeded

    params = pltpu.InterpretParams(random_seed=0, **tpu_rules.SETTINGS[setting])
    printed = io.StringIO()
    try:
        with pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed), \
                backend.quiet_callback_errors():
            out = Deadline(5.0).call(lambda: jax.block_until_ready(module.column_sums(x, block_rows=8)))
    except DeadlineExceeded:
        return "hangs (deadline)"
    finally:
        pltpu.reset_tpu_interpret_mode_state()
    error = np.abs(np.asarray(out) - np.asarray(x).sum(0))
    notes = []
    if not np.isfinite(error).all():
        notes.append("NaN")
    elif error.max() > 1e-3:
        notes.append(f"wrong (max error {error.max():.3g})")
    else:
        notes.append("right values")
    if "non-zero count" in printed.getvalue():
        notes.append("semaphore left counting")
    if "RACE DETECTED" in printed.getvalue() or (params.detect_races and jax_internals.races_found()):
        notes.append("RACE DETECTED")
    return ", ".join(notes)


def main() -> None:
    import jax
    import jax.numpy as jnp

    from pytest_tpucourse.checking import tpu_rules
    from pytest_tpucourse.run.mutants import load_mutants

    solution = (REPO / "solutions/ch06/double_buffering.py").read_text()
    mutants = {m.name: m for m in load_mutants(REPO / "tests/mutants/ch06.toml")}
    x = jnp.asarray(np.random.default_rng(0).standard_normal((64, 256)), jnp.float32)
    print(f"column_sums(x (64, 256) float32, block_rows=8), jax {jax.__version__}, TPU interpret mode on "
          f"{jax.devices()[0].platform}")
    print()
    print("| kernel | " + " | ".join(tpu_rules.DMA_SETTINGS) + " |")
    print("|---|" + "---|" * len(tpu_rules.DMA_SETTINGS))
    for name in ("solution",) + MUTANTS:
        source = solution if name == "solution" else mutants[name].apply(solution)
        module = load(source, f"double_buffering_{name}")
        cells = [outcome(module, x, setting) for setting in tpu_rules.DMA_SETTINGS]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
