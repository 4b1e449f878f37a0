"""What TPU interpret mode shows of distributed-kernel bugs, on simulated CPU devices.

    python bench/distributed_interpret.py                 # all three tables
    python bench/distributed_interpret.py --only modes    # modes | deadlock | sizes

modes     chapter 14's solutions, the two DMA bugs the chapter's mutants plant (a
          semaphore pair shared by every all-gather step, one receive slot for every
          reduce-scatter step) and JAX's own jax.experimental.pallas.ops.tpu.all_gather,
          each on rings of 4 and 8 devices: right or wrong under dma_execution_mode
          'on_wait' and 'eager', and how many of 3 race-detector seeds flag a race.
deadlock  the shipped pair exchange (both partners wait before either signals) as a
          graded call with a 60 s deadline: how long until it is stopped, and the report.
sizes     a ring permute whose per-device array is 64 KiB to 256 KiB, on 4 and 8
          devices, each in its own process with a 60 s timeout: runs, or hangs.

Interpret-mode results say what the simulator shows, never how fast a TPU is. The
machine's load changes the times, not the verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEVICES = 8


def _setup():
    import jax

    jax.config.update("jax_num_cpu_devices", DEVICES)


def _mesh(n):
    import jax
    from jax.sharding import AxisType

    return jax.make_mesh((n,), ("x",), devices=jax.devices()[:n], axis_types=(AxisType.Auto,))


def _module(tree: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_bench_{tree.name}_{name}", tree / "ch14" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variants(workdir: Path):
    """(label, function, reference name) of each kernel compared."""
    from jax.experimental.pallas.ops.tpu import all_gather as jax_all_gather

    from pytest_tpucourse.run.mutants import build_tree, load_mutants

    mutants = {m.name: m for m in load_mutants(REPO / "tests" / "mutants" / "ch14.toml")}
    shared = _module(build_tree(mutants["all_gather_shared_semaphore"], REPO / "solutions", workdir / "a"),
                     "all_gather")
    slot = _module(build_tree(mutants["reduce_scatter_reused_receive_slot"], REPO / "solutions",
                              workdir / "b"), "reduce_scatter")
    solved_gather = _module(REPO / "solutions", "all_gather")
    solved_scatter = _module(REPO / "solutions", "reduce_scatter")
    return [
        ("all-gather, solution", solved_gather.all_gather, "gather"),
        ("all-gather, one semaphore pair for every step", shared.all_gather, "gather"),
        ("all-gather, jax.experimental.pallas.ops.tpu", jax_all_gather.all_gather, "gather"),
        ("reduce-scatter, solution", solved_scatter.reduce_scatter, "scatter"),
        ("reduce-scatter, one receive slot for every step", slot.reduce_scatter, "scatter"),
    ]


def _right(kind, n, x, out):
    import numpy as np

    x = np.asarray(x, np.float64)
    if kind == "gather":  # every device's copy must be all of x
        return all(np.array_equal(np.asarray(s.data, np.float64), x) for s in out.addressable_shards)
    rows = x.shape[0] // (n * n)
    expected = x.reshape(n, n, rows, -1).sum(0).reshape(n * rows, -1)
    return bool(np.allclose(np.asarray(out, np.float64), expected, rtol=1e-5, atol=1e-5))


def modes_table():
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import tpu as pltpu
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter

    print("| kernel | devices | on_wait | eager | races flagged (seeds 0-2) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for label, fn, kind in _variants(Path(workdir)):
            for n in (4, DEVICES):
                rows = n * 8 if kind == "gather" else n * n * 8
                x = jnp.asarray((jnp.arange(rows * 128) % 97).reshape(rows, 128), jnp.float32)
                call = jax.jit(functools.partial(fn, mesh=_mesh(n), axis_name="x"))
                verdicts, flagged = [], 0
                for mode, seed, races in [("on_wait", 0, False), ("eager", 0, False)] + \
                        [("on_wait", s, True) for s in range(3)]:
                    params = pltpu.InterpretParams(dma_execution_mode=mode, random_seed=seed, detect_races=races)
                    printed = io.StringIO()
                    with pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed):
                        out = jax.block_until_ready(call(x))
                    if races:
                        flagged += bool((interpreter.races and interpreter.races.races_found)
                                        or "RACE DETECTED" in printed.getvalue())
                    else:
                        verdicts.append("right" if _right(kind, n, x, out) else "WRONG")
                print(f"| {label} | {n} | {verdicts[0]} | {verdicts[1]} | {flagged}/3 |", flush=True)


def deadlock_report():
    import jax.numpy as jnp
    from jax.experimental.pallas import tpu as pltpu

    from pytest_tpucourse import checks
    from pytest_tpucourse.grading.deadline import Deadline
    from pytest_tpucourse.run.mutants import build_tree, load_mutants

    mutant = next(m for m in load_mutants(REPO / "tests" / "mutants" / "ch14.toml")
                  if m.name == "exchange_waits_before_signalling")
    pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0))
    deadline = Deadline(60)
    x = jnp.ones((64, 128), jnp.float32)
    with tempfile.TemporaryDirectory() as workdir:
        shipped = _module(build_tree(mutant, REPO / "solutions", Path(workdir)), "timeline")
        fixed = _module(REPO / "solutions", "timeline")
        for label, fn in (("the shipped pair exchange", shipped.pair_exchange),
                          ("the fixed one, next", fixed.pair_exchange)):
            start = time.perf_counter()
            try:
                checks.graded(fn, "pair_exchange()")(x, mesh=_mesh(DEVICES))
                outcome = "ran"
            except Exception as error:  # the graded call's short report
                outcome = str(error)
            print(f"{label}: {time.perf_counter() - start:.1f} s (deadline 60 s)\n  "
                  + "\n  ".join(outcome.splitlines()), flush=True)


SIZE_SCRIPT = """
import functools, sys
import jax, jax.numpy as jnp
jax.config.update("jax_num_cpu_devices", 8)
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType
sys.path.insert(0, {solutions!r})
import permute
n, rows = int(sys.argv[1]), int(sys.argv[2])
mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n], axis_types=(AxisType.Auto,))
with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
    jax.block_until_ready(jax.jit(functools.partial(permute.ring_permute, mesh=mesh))(
        jnp.ones((n * rows, 128), jnp.float32)))
"""


def sizes_table():
    print("| devices | per-device array | result |")
    print("|---|---|---|")
    script = SIZE_SCRIPT.format(solutions=str(REPO / "solutions" / "ch14"))
    for n, kib in ((DEVICES, 64), (DEVICES, 96), (DEVICES, 128), (4, 128), (4, 256)):
        rows = kib * 1024 // (128 * 4)
        start = time.perf_counter()
        try:
            subprocess.run([sys.executable, "-c", script, str(n), str(rows)], timeout=60, check=True,
                           capture_output=True)
            result = f"ran ({time.perf_counter() - start:.1f} s, process included)"
        except subprocess.TimeoutExpired:
            result = "hung (stopped after 60 s)"
        print(f"| {n} | {kib} KiB | {result} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("modes", "deadlock", "sizes"))
    args = parser.parse_args()
    _setup()
    import jax

    print(f"jax {jax.__version__}, {DEVICES} simulated CPU devices, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}\n")
    for name, table in (("modes", modes_table), ("deadlock", deadlock_report), ("sizes", sizes_table)):
        if args.only in (None, name):
            table()
            print()


if __name__ == "__main__":
    main()
