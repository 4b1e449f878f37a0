"""Chapter 13's accuracy report: the course's metric and what allclose would say, side by side.

    python bench/attention_accuracy.py                      # the shipped solutions
    python bench/attention_accuracy.py --tree exercises     # your work
    python bench/attention_accuracy.py --impl-root DIR      # any tree laid out like solutions/

The course states flash attention's accuracy as "1e-3 forward, 1e-2 grads in bf16". The
graders read that as a bound on the relative Frobenius error against the float64 oracle
rounded to bf16 (docs/checking.md, the tolerance rule). A reader may take the same words
for numpy.allclose(rtol=atol=1e-3) or (rtol=atol=1e-2), which asks every element to be
close. This prints both for every output and grad at gate 03's correctness problem
(B=1, H=2, S=512, D=128, bf16, 128 blocks, causal and not), and JAX's own flash attention
beside the graded tree, so a number can be quoted with the metric it was measured in.
Kernels run under TPU interpret mode: off-chip verification of numerics, not a hardware run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import backend, public_kernels, references
from pytest_tpucourse.core import tolerance
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.implementations import GradedTree, Implementation
from tolerance_evidence import _f64, _oracle

REPO = Path(__file__).resolve().parents[1]
ALLCLOSE = {"forward": 1e-3, "grad": 1e-2}  # the course's two figures


def figures(got, expected, floor, kind: str) -> str:
    """One table row's cells: the rule's error and bound, and allclose's verdict."""
    reference = tolerance.rounded_reference(expected, "bfloat16")
    error, bound, _ = tolerance.judge(_f64(got), expected, "bfloat16", kind, _f64(floor))
    tol = ALLCLOSE[kind]
    close = np.abs(_f64(got) - reference) <= tol + tol * np.abs(reference)
    worst = float(np.max(np.abs(_f64(got) - reference)))
    return (f"{error:.2e} | {bound:.2e} | {'pass' if error <= bound else 'FAIL'} | "
            f"{tol:.0e} | {100 * close.mean():.2f}% | {worst:.2e} | {'True' if close.all() else 'False'}")


def report(name: str, flash_forward, flash_attention, causal: bool) -> list[str]:
    config = tst.AttentionConfig(1, 2, 2, 512, 512, 128, causal, "bfloat16")
    q, k, v = config.arrays(0)
    rows = []
    with_lse = references.ATTENTION_WITH_LSE.bind(causal=causal)
    if flash_forward is not None:
        out, _ = flash_forward(q, k, v, causal=causal)
        expected = _oracle(references.ATTENTION.bind(causal=causal), (q, k, v))
        floor, _ = with_lse.floor(q, k, v)
        rows.append(f"| {name} | {'causal' if causal else 'full'} | out | {figures(out, expected, floor, 'forward')} |")
    reference = references.ATTENTION.bind(causal=causal)
    cotangent = tst.random_array(q.shape, "bfloat16", 7)
    expected = _oracle(reference, (q, k, v), grads_for=True, cotangent=cotangent)
    floor_grads = jax.vjp(reference.floor, q, k, v)[1](cotangent)
    grads = jax.vjp(lambda *a: flash_attention(*a, causal=causal), q, k, v)[1](cotangent)
    for grad, got, exp, floor in zip(("dq", "dk", "dv"), grads, expected, floor_grads):
        rows.append(f"| {name} | {'causal' if causal else 'full'} | {grad} | {figures(got, exp, floor, 'grad')} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", choices=("solutions", "exercises"), default="solutions")
    parser.add_argument("--impl-root", help="grade this tree instead (laid out like solutions/)")
    args = parser.parse_args()
    backend.select("tpu")
    tree = (GradedTree("impl-root", Path(args.impl_root).resolve()) if args.impl_root
            else GradedTree(args.tree, REPO / args.tree))
    chapter = Implementation(tree, load_course(REPO), "ch13")
    graded = (str(tree.root.relative_to(REPO)) if tree.root.is_relative_to(REPO) else str(tree.root)) + "/ch13"
    candidates = (
        (graded, chapter.forward.flash_forward.resolve(), chapter.backward.flash_attention.resolve()),
        ("jax ops.tpu.flash_attention", public_kernels.flash_forward, public_kernels.flash_attention),
    )
    print("B=1, H=2, S=512, D=128, bf16, 128 blocks; R = the float64 oracle rounded to bf16; "
          "rule: relative Frobenius error ||x - R|| / ||R|| <= bound (tolerance.py); "
          "allclose: |x - R| <= tol + tol * |R| for every element")
    print()
    print("| implementation | mask | output | rel. Frobenius error | bound | rule | allclose tol | "
          "elements within | max abs error | allclose |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for causal in (False, True):
        for name, forward, attention in candidates:
            for row in report(name, forward, attention, causal):
                print(row, flush=True)
    print()
    print(f"jax {jax.__version__}, TPU interpret mode on {jax.default_backend()}")


if __name__ == "__main__":
    pltpu.set_tpu_interpret_mode(backend.tpu_interpret_params())
    main()
