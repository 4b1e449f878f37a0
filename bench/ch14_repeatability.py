"""Is every chapter 14 mistake caught on every run? The value checks of the ch14 graded tests,
repeated on the shipped mutants and the solutions, in one process.

    python bench/ch14_repeatability.py [REPEATS] [SECONDS] [NAME,NAME,... | all]

Each named mutant (tests/mutants/ch14.toml; `solution:MODULE` for a shipped solution; `all`:
every mutant whose module has a value check here, then the four solutions) is built
as a tree and checked REPEATS times with the graded tests' own checks (both DMA execution modes,
the device-order check) on a ring of 8 simulated devices, until SECONDS have passed. It prints,
per kernel, how often each verdict came out: a mistake caught every time shows one verdict only.
Interpret-mode results say what the simulator shows, never how fast a TPU is.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT = ["permute_barrier_signals_the_wrong_neighbour", "all_gather_two_semaphore_pairs_in_turn",
           "all_gather_shared_semaphore", "collective_matmul_no_credit", "reduce_scatter_reused_receive_slot",
           "collective_matmul_one_buffer", "permute_missing_wait", "all_gather_missing_wait",
           "solution:permute", "solution:all_gather", "solution:reduce_scatter", "solution:collective_matmul"]


def main() -> None:
    from pytest_tpucourse.prompt import load, mesh  # JAX set up as a graded run: 8 simulated devices

    from jax.experimental.pallas import tpu as pltpu

    from pytest_tpucourse import checks, references, tpu
    from pytest_tpucourse import strategies as tst
    from pytest_tpucourse.run.mutants import build_tree, load_mutants

    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 600.0
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else DEFAULT
    start = time.time()
    if names == ["all"]:
        names = [m.name for m in load_mutants(REPO / "tests" / "mutants" / "ch14.toml")
                 if m.module in ("permute", "all_gather", "reduce_scatter", "collective_matmul")]
        names += [f"solution:{module}" for module in ("permute", "all_gather", "reduce_scatter", "collective_matmul")]

    ring = dict(mesh=mesh(8), axis_name="x")
    cases = {  # module -> (function, inputs, keyword arguments, reference), as the graded tests build them
        "permute": ("ring_permute", (tst.random_array((64, 128), "float32", 0),), {**ring, "shift": 1},
                    references.PERMUTE),
        "all_gather": ("all_gather", (tst.random_array((64, 128), "float32", 0),), ring, references.ALL_GATHER),
        "reduce_scatter": ("reduce_scatter", (tst.random_array((8 * 8 * 8, 128), "float32", 0),), ring,
                           references.REDUCE_SCATTER),
        "collective_matmul": ("all_gather_matmul", (tst.random_array((128, 128), "bfloat16", 0),
                                                    tst.random_array((128, 1024), "bfloat16", 1)), ring,
                              references.ALL_GATHER_MATMUL),
    }

    def verdict(error: Exception) -> str:
        text = str(error)
        for key in ("lets a copy land", "has a data race", "is wrong", "NaN", "not back at zero", "deadlocked"):
            if key in text:
                return key
        return text.splitlines()[0][:90]

    mutants = {m.name: m for m in load_mutants(REPO / "tests" / "mutants" / "ch14.toml")}
    with tempfile.TemporaryDirectory() as work, pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        for name in names:
            if name.startswith("solution:"):
                module_name = name.split(":", 1)[1]
                module = load(REPO / "solutions" / "ch14" / f"{module_name}.py")
            else:
                mutant = mutants[name]
                module_name = mutant.module
                module = load(build_tree(mutant, REPO / "solutions", Path(work) / name) / "ch14" / f"{module_name}.py")
            function, args, kwargs, reference = cases[module_name]
            fn = checks.graded(getattr(module, function), f"{function}()")
            seen = Counter()
            for _ in range(repeats):
                if time.time() - start > budget:
                    seen["(out of time)"] += 1
                    break
                try:
                    tpu.assert_correct_in_each_dma_mode(fn, lambda: checks.assert_matches_reference(
                        fn, args, kwargs=kwargs, reference=reference.bind(**kwargs)))
                    seen["passed"] += 1
                except Exception as error:  # a mutant's verdict, counted
                    seen[verdict(error)] += 1
            print(f"{name}: {dict(seen)}  [{time.time() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
