"""Graded tests for ch03.stablehlo: stablehlo_text(fn, *args)."""

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

# (name, function, input shapes, ops its StableHLO must contain)
PROGRAMS = [
    ("tanh(x @ w)", lambda x, w: jnp.tanh(x @ w), [(8, 16), (16, 32)],
     ["stablehlo.dot_general", "stablehlo.tanh"]),
    ("softmax", lambda x: jax.nn.softmax(x, axis=-1), [(4, 128)],
     ["stablehlo.reduce", "stablehlo.exponential", "stablehlo.divide"]),
    ("causal attention", lambda q, k, v: references.attention_floor(q, k, v, causal=True),
     [(1, 2, 16, 8)] * 3, ["stablehlo.dot_general", "stablehlo.select", "stablehlo.iota"]),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_stablehlo_text(impl, program):
    name, f, shapes, ops = program
    args = [tst.random_array(s, "float32", i) for i, s in enumerate(shapes)]
    fn = impl.stablehlo.stablehlo_text
    text = fn(f, *args)
    where = f"{fn.display}, for {name} on shapes {shapes}"
    note = f"the function is PROGRAMS {name!r} of exercises/ch03/test_stablehlo.py"
    if not isinstance(text, str):
        checks.fail(fn, f"{where}: should return a str, got {type(text).__name__}", note=note)
    if "HloModule" in text:
        checks.fail(fn, f"{where}: returned XLA's optimised HLO (it starts 'HloModule'); the exercise asks for "
                        f"StableHLO, the program before XLA compiles it: .lower(...).as_text(), no .compile()",
                    note=note)
    if not (text.lstrip().startswith("module @") and "func.func public @main" in text):
        checks.fail(fn, f"{where}: is not a StableHLO module (expected 'module @...' with 'func.func public "
                        f"@main'); it starts {text.strip()[:80]!r}", note=note)
    missing = [op for op in ops if op not in text]
    if missing:
        checks.fail(fn, f"{where}: the text has no {', '.join(missing)}", note=note)
    types = "".join(f"tensor<{'x'.join(map(str, s))}xf32>" for s in shapes[:1])
    if types not in text:
        checks.fail(fn, f"{where}: the text has no operand of type {types}: lowered for other inputs?", note=note)


# The trusted check (docs/grading.md): a program of PROGRAMS on shapes the grader draws.
def _program(index):
    return PROGRAMS[index][1]


def _spec(shape):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)


def _is_the_module(got, expected):
    """None when `got` is the StableHLO module of the program (its ops, its first operand's type)."""
    ops, first_type = expected
    if not isinstance(got, str):
        return f"returned a {type(got).__name__}, not the module's text"
    if "HloModule" in got:
        return "returned XLA's optimised HLO ('HloModule ...'), not StableHLO"
    if not (got.lstrip().startswith("module @") and "func.func public @main" in got):
        return f"the text is not a StableHLO module; it starts {got.strip()[:80]!r}"
    missing = [op for op in ops if op not in got]
    if missing:
        return f"the text has no {', '.join(missing)}"
    return None if first_type in got else f"the text has no operand of type {first_type}: lowered for other inputs?"


def _trusted_cases(rng):
    m, k, n = (int(rng.integers(2, 65)) for _ in range(3))
    rows, cols = int(rng.integers(2, 17)), int(rng.integers(8, 257))
    cases = []
    for index, shapes in ((0, [(m, k), (k, n)]), (1, [(rows, cols)])):
        name, _, _, ops = PROGRAMS[index]
        args = [tst.random_array(s, "float32", checks.trusted.seed(rng)) for s in shapes]
        first = f"tensor<{'x'.join(map(str, shapes[0]))}xf32>"
        cases.append(checks.trusted.exact(
            "stablehlo_text", (checks.trusted.built(_program, index, label=name), *args),
            expected=(ops, first), compare=_is_the_module))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
