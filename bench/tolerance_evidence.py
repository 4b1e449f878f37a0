"""The evidence behind the tolerance rule: errors of correct and wrong implementations.

    python bench/tolerance_evidence.py            # about 2 minutes on 2 CPU cores

For each case it prints the relative Frobenius error against the float64 oracle
rounded to the output dtype, the XLA floor's own error, the bound the rule sets
(tolerance.py), and whether the rule accepts it. Correct implementations must
all be accepted and the wrong ones all rejected; docs/checking.md ("The tolerance rule") holds the
table this prints. Kernels run under TPU interpret mode: the errors are
off-chip verification, not hardware measurements.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import public_kernels, references
from pytest_tpucourse.core import tolerance
from pytest_tpucourse.grading import backend
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.run.mutants import build_tree, load_mutants

REPO = Path(__file__).resolve().parents[1]
BF16 = jnp.bfloat16


def fully_bf16_attention(q, k, v, *, causal=False):
    """WRONG: scores, softmax and P·V all accumulated and stored in bf16."""
    return references.attention(q, k, v, causal=causal, probabilities_dtype=BF16, accumulate=BF16)


def f32_probabilities_attention(q, k, v, *, causal=False):
    """Correct, and more precise than the floor: P kept in f32 for P·V."""
    return references.attention(q, k, v, causal=causal)


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _oracle(reference, args, grads_for=None, cotangent=None):
    with jax.enable_x64(True):
        args64 = [jnp.asarray(np.asarray(a, np.float64)) for a in args]
        if grads_for is None:
            return np.asarray(reference.oracle(*args64), np.float64)
        _, pullback = jax.vjp(reference.oracle, *args64)
        return [np.asarray(g, np.float64) for g in pullback(jnp.asarray(np.asarray(cotangent, np.float64)))]


def _f64(x):
    return np.asarray(x).astype(np.float64)


def row(case, implementation, correct, got, expected, floor, dtype, kind):
    error, bound, floor_error = tolerance.judge(_f64(got), expected, dtype, kind, _f64(floor))
    accepted = error <= bound
    verdict = "accepted" if accepted else "rejected"
    ok = "" if accepted == correct else "  <-- RULE IS WRONG HERE"
    print(f"| {case} | {implementation} | {'correct' if correct else 'WRONG'} | {error:.2e} | "
          f"{floor_error:.2e} | {bound:.2e} | {verdict}{ok} |", flush=True)
    return accepted == correct


def matmul_cases() -> bool:
    solution = _load(REPO / "solutions/ch11/matmul.py", "solution_matmul")
    mutant = next(m for m in load_mutants(REPO / "tests/mutants/ch11.toml")
                  if m.name == "matmul_bf16_accumulator")
    tree = build_tree(mutant, REPO / "solutions", Path(tempfile.mkdtemp()))
    wrong = _load(tree / "ch11/matmul.py", "mutant_matmul")
    ok = True
    for k in (512, 2048, 8192):
        x = tst.random_array((256, k), "bfloat16", 0)
        y = tst.random_array((k, 256), "bfloat16", 1)
        expected = _oracle(references.MATMUL, (x, y))
        floor = references.MATMUL.floor(x, y)
        case = f"matmul 256x{k}x256 bf16"
        for name, correct, fn in (
            ("XLA floor (f32 accumulator)", True, references.MATMUL.floor),
            ("solutions/ch11 kernel", True, solution.matmul),
            ("jax ops.tpu.matmul", True, public_kernels.matmul),
            ("bf16 accumulator", False, wrong.matmul),
        ):
            ok &= row(case, name, correct, fn(x, y), expected, floor, "bfloat16", "forward")
    return ok


def attention_cases() -> bool:
    ok = True
    configs = (
        tst.AttentionConfig(1, 2, 2, 256, 256, 128, False, "bfloat16"),
        tst.AttentionConfig(1, 2, 2, 256, 256, 128, True, "bfloat16"),
        tst.AttentionConfig(1, 2, 2, 1024, 1024, 128, True, "bfloat16"),
    )
    for config in configs:
        q, k, v = config.arrays(0)
        reference = references.ATTENTION.bind(causal=config.causal)
        expected = _oracle(reference, (q, k, v))
        floor = reference.floor(q, k, v)
        case = f"attention S={config.q_len} {'causal' if config.causal else 'full'} bf16"
        for name, correct, fn in (
            ("XLA floor (f32 softmax, P in bf16)", True, reference.floor),
            ("XLA, P kept in f32", True, f32_probabilities_attention),
            ("jax ops.tpu.flash_attention", True, public_kernels.flash_attention),
            ("jax ops.tpu.splash_attention", True, public_kernels.splash_attention),
            ("naive, fully bf16", False, fully_bf16_attention),
        ):
            kwargs = {} if fn is reference.floor else {"causal": config.causal}
            ok &= row(case, name, correct, fn(q, k, v, **kwargs), expected, floor, "bfloat16", "forward")
    return ok


def attention_grad_cases() -> bool:
    ok = True
    config = tst.AttentionConfig(1, 2, 2, 256, 256, 128, True, "bfloat16")
    q, k, v = config.arrays(0)
    reference = references.ATTENTION.bind(causal=True)
    cotangent = tst.random_array(q.shape, "bfloat16", 7)
    expected = _oracle(reference, (q, k, v), grads_for=True, cotangent=cotangent)
    _, floor_pullback = jax.vjp(reference.floor, q, k, v)
    floor_grads = floor_pullback(cotangent)
    for name, correct, fn in (
        ("XLA floor", True, reference.floor),
        ("jax ops.tpu.flash_attention", True, lambda *a: public_kernels.flash_attention(*a, causal=True)),
        ("jax ops.tpu.splash_attention", True, lambda *a: public_kernels.splash_attention(*a, causal=True)),
        ("naive, fully bf16", False, lambda *a: fully_bf16_attention(*a, causal=True)),
    ):
        _, pullback = jax.vjp(fn, q, k, v)
        grads = pullback(cotangent)
        for grad_name, got, exp, fl in zip(("dq", "dk", "dv"), grads, expected, floor_grads):
            ok &= row(f"attention S=256 causal bf16, {grad_name}", name, correct, got, exp, fl,
                      "bfloat16", "grad")
    return ok


def main() -> None:
    backend.select("tpu")
    start = time.perf_counter()
    print(f"rule: error <= min({tolerance.FLOOR_FACTOR:g} x floor error + margin, ceiling); margin "
          f"bf16 forward {tolerance.base('bfloat16'):.0e}, grads {tolerance.base('bfloat16', 'grad'):.0e}; "
          f"ceiling bf16 {tolerance.CEILING['bfloat16']:.0e}")
    print()
    print("| case | implementation | is | error | floor's error | bound | rule says |")
    print("|---|---|---|---|---|---|---|")
    ok = matmul_cases() & attention_cases() & attention_grad_cases()
    print()
    print(f"jax {jax.__version__}, TPU interpret mode on {jax.default_backend()}, "
          f"{time.perf_counter() - start:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    pltpu.set_tpu_interpret_mode(backend.tpu_interpret_params())
    main()
