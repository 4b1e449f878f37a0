"""Precision over length: how a backward's bf16 accumulators fall behind as sequences grow.

    python bench/precision_over_length.py                  # lengths 256 .. 4096, about 4 minutes on 2 cores
    python bench/precision_over_length.py --lengths 512 2048

A flash backward sums dK and dV over the q blocks: Sq / block_q additions per kv block.
Kept in f32 that sum is as precise as XLA's; kept in bf16 (the mutant
`dkv_accumulated_in_bf16` of tests/mutants/ch13.toml) it rounds after every q block,
and its error grows with the number of q blocks. For each length this prints, per
grad, the relative Frobenius error of the XLA floor, the tolerance rule's bound
(tolerance.py), and the errors of the shipped solution, JAX's own flash attention
and the bf16-accumulator mutant, all against the float64 oracle rounded to bf16 with
the same seeded cotangent. Causal, bf16, one head of D = 64, block_q = 128 (many
q blocks to accumulate over) and block_kv = 512 (few grid steps under TPU interpret
mode). Kernels run under TPU interpret mode: off-chip verification of numerics,
not hardware runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import backend, public_kernels, references
from pytest_tpucourse.core import tolerance
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.implementations import GradedTree, Implementation
from pytest_tpucourse.run.mutants import build_tree, load_mutants
from tolerance_evidence import _f64, _oracle

REPO = Path(__file__).resolve().parents[1]
BLOCKS = dict(block_q=128, block_kv=512)
MUTANT = "dkv_accumulated_in_bf16"


def implementations():
    """(name, the grads it gets wrong, fn(q, k, v)): the solution, JAX's kernel, the mutant."""
    course = load_course(REPO)
    mutant = next(m for m in load_mutants(REPO / "tests/mutants/ch13.toml") if m.name == MUTANT)
    mutant_root = build_tree(mutant, REPO / "solutions", Path(tempfile.mkdtemp()))

    def flash(kind: str, root: Path):
        function = Implementation(GradedTree(kind, root), course, "ch13").backward.flash_attention.resolve()
        return lambda q, k, v: function(q, k, v, causal=True, **BLOCKS)

    return (
        ("solutions/ch13", (), flash("solutions", REPO / "solutions")),
        ("jax ops.tpu.flash_attention", (),
         lambda q, k, v: public_kernels.flash_attention(q, k, v, causal=True, **BLOCKS)),
        ("bf16 dk/dv accumulators", ("dk", "dv"), flash("impl-root", mutant_root)),
    )


def measure(length: int, candidates, seed: int) -> list[str]:
    config = tst.AttentionConfig(1, 1, 1, length, length, 64, True, "bfloat16")
    q, k, v = config.arrays(seed)
    reference = references.ATTENTION.bind(causal=True)
    cotangent = tst.random_array(q.shape, "bfloat16", seed + 7)
    expected = _oracle(reference, (q, k, v), grads_for=True, cotangent=cotangent)
    floor_grads = jax.vjp(reference.floor, q, k, v)[1](cotangent)
    got = {name: jax.vjp(fn, q, k, v)[1](cotangent) for name, _, fn in candidates}
    lines = []
    for position, grad in enumerate(("dq", "dk", "dv")):
        floor = _f64(floor_grads[position])
        _, bound, floor_error = tolerance.judge(floor, expected[position], "bfloat16", "grad", floor)
        cells = []
        for name, wrong, _ in candidates:
            error = tolerance.relative_error(_f64(got[name][position]),
                                             tolerance.rounded_reference(expected[position], "bfloat16"))
            verdict = "" if (error <= bound) == (grad not in wrong) else " (!)"
            cells.append(f"{error:.2e}{'' if error <= bound else ' rejected'}{verdict}")
        lines.append(f"| {length} | {length // BLOCKS['block_q']} | {grad} | {floor_error:.2e} | "
                     f"{bound:.2e} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--seed", type=int, default=0, help="inputs from this seed, the cotangent from seed + 7")
    args = parser.parse_args()
    backend.select("tpu")
    candidates = implementations()
    start = time.perf_counter()
    print(f"causal bf16 attention, B=1, H=1, D=64, blocks {BLOCKS}; seed {args.seed}; "
          f"error = relative Frobenius error against the float64 oracle rounded to bf16; "
          f"bound = floor's error + {tolerance.base('bfloat16', 'grad'):.0e}, at most "
          f"{tolerance.CEILING['bfloat16']:.0e}")
    print()
    print("| S | q blocks | grad | XLA floor | bound | " + " | ".join(n for n, _, _ in candidates) + " |")
    print("|---|---|---|---|---|" + "---|" * len(candidates))
    for length in args.lengths:
        for line in measure(length, candidates, args.seed):
            print(line, flush=True)
    print()
    print(f"jax {jax.__version__}, TPU interpret mode on {jax.default_backend()}, "
          f"{time.perf_counter() - start:.0f} s; (!) marks a verdict the rule gets wrong")


if __name__ == "__main__":
    pltpu.set_tpu_interpret_mode(backend.tpu_interpret_params())
    main()
