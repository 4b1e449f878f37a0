"""Graded tests for ch04.hlo: optimized_hlo(fn, *args), count_fusions(hlo_text)."""

import re

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import checks
from pytest_tpucourse import strategies as tst

# Optimised HLO as XLA:CPU printed it (JAX 0.10.2), metadata trimmed: tanh(x) * 2 + 1.
ONE_LOOP_FUSION = """\
HloModule jit__lambda, is_scheduled=true, entry_computation_layout={(f32[128,128]{1,0})->f32[128,128]{1,0}}

%fused_computation (param_0.2: f32[128,128]) -> f32[128,128] {
  %param_0.2 = f32[128,128]{1,0} parameter(0)
  %tanh.0 = f32[128,128]{1,0} tanh(%param_0.2)
  %constant.1 = f32[] constant(2)
  %mul.1 = f32[128,128]{1,0} broadcast(%constant.1), dimensions={}
  %mul.0 = f32[128,128]{1,0} multiply(%tanh.0, %mul.1)
  %constant.0 = f32[] constant(1)
  %add.1 = f32[128,128]{1,0} broadcast(%constant.0), dimensions={}
  ROOT %add.0 = f32[128,128]{1,0} add(%mul.0, %add.1)
}

ENTRY %main.1 (x.1: f32[128,128]) -> f32[128,128] {
  %x.1 = f32[128,128]{1,0} parameter(0), metadata={op_name="x"}
  ROOT %broadcast_add_fusion = f32[128,128]{1,0} fusion(%x.1), kind=kLoop, calls=%fused_computation
}
"""

# Naive attention on XLA:CPU (ENTRY only): five fusions, two of them custom (dot) fusions.
NAIVE_ATTENTION_ENTRY = """\
ENTRY %main.3 (q.1: f32[1,2,256,64], k.1: f32[1,2,256,64], v.1: f32[1,2,256,64]) -> f32[1,2,256,64] {
  %q.1 = f32[1,2,256,64]{3,2,1,0} parameter(0), metadata={op_name="q"}
  %k.1 = f32[1,2,256,64]{3,2,1,0} parameter(1), metadata={op_name="k"}
  %v.1 = f32[1,2,256,64]{3,2,1,0} parameter(2), metadata={op_name="v"}
  %ynn_fusion.2 = f32[1,2,256,256]{3,2,1,0} fusion(%q.1, %k.1), kind=kCustom, calls=%fused_computation.2
  %bitcast.6 = f32[2,256,64]{2,1,0} bitcast(%v.1), metadata={op_name="v"}
  %ynn_fusion.1 = f32[1,2,256]{2,1,0} fusion(%ynn_fusion.2), kind=kCustom, calls=%fused_computation.1
  %broadcast_divide_fusion = f32[1,2,256]{2,1,0} fusion(%ynn_fusion.1), kind=kLoop, calls=%fused_computation.4
  %multiply_bitcast_fusion = f32[2,256,256]{2,1,0} fusion(%ynn_fusion.2, %broadcast_divide_fusion), kind=kLoop, calls=%fused_computation.3
  %ynn_fusion = f32[2,256,64]{2,1,0} fusion(%multiply_bitcast_fusion, %bitcast.6), kind=kCustom, calls=%fused_computation
  ROOT %bitcast.7 = f32[1,2,256,64]{3,2,1,0} bitcast(%ynn_fusion)
}
"""

# TPU-style lines: tiled layouts, operands printed with their shapes, a multi-output
# fusion whose shape is a tuple, and a convolution fusion (the MXU's matmul kernel).
TPU_STYLE = """\
ENTRY %main.9 (Arg_0.1: bf16[1024,1024], Arg_1.2: bf16[1024,1024]) -> (f32[1024], bf16[1024,1024]) {
  %Arg_0.1 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %Arg_1.2 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(1)
  %convolution.3 = bf16[1024,1024]{1,0:T(8,128)(2,1)} fusion(bf16[1024,1024]{1,0:T(8,128)(2,1)} %Arg_0.1, bf16[1024,1024]{1,0:T(8,128)(2,1)} %Arg_1.2), kind=kOutput, calls=%fused_computation.1
  %fusion.2 = (f32[1024]{0:T(1024)}, f32[1024]{0:T(1024)}) fusion(bf16[1024,1024]{1,0:T(8,128)(2,1)} %convolution.3), kind=kInput, calls=%fused_computation.2
  %get-tuple-element.4 = f32[1024]{0:T(1024)} get-tuple-element((f32[1024]{0:T(1024)}, f32[1024]{0:T(1024)}) %fusion.2), index=0
  ROOT %tuple.5 = (f32[1024]{0:T(1024)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) tuple(f32[1024]{0:T(1024)} %get-tuple-element.4, bf16[1024,1024]{1,0:T(8,128)(2,1)} %convolution.3)
}
"""

NO_FUSION = """\
ENTRY %main.2 (x.1: f32[128,256]) -> f32[128,256] {
  %x.1 = f32[128,256]{1,0} parameter(0), metadata={op_name="x"}
  ROOT %sort.0 = f32[128,256]{1,0} sort(%x.1), dimensions={1}, is_stable=true, to_apply=%region_0.1
}
"""

SNIPPETS = [("one loop fusion", ONE_LOOP_FUSION, 1), ("naive attention", NAIVE_ATTENTION_ENTRY, 5),
            ("TPU style", TPU_STYLE, 2), ("no fusion", NO_FUSION, 0)]


@pytest.mark.parametrize("case", SNIPPETS, ids=[c[0] for c in SNIPPETS])
def test_count_fusions(impl, case):
    name, text, want = case
    fn = impl.hlo.count_fusions
    got = fn(text)
    checks.assert_equal(got, want, fn=fn, what=f"the fusions it counts in the {name!r} module (fusion "
                        f"instructions, not fused computations)",
                        note=f"the text is SNIPPETS {name!r} of exercises/ch04/test_hlo.py")


def test_optimized_hlo(impl):
    x = tst.random_array((128, 256), "float32", 0)
    f = lambda x: jnp.tanh(x) * 2.0 + 1.0  # noqa: E731
    fn = impl.hlo.optimized_hlo
    text = fn(f, x)
    where = f"{fn.display} for tanh(x) * 2 + 1 on x(128, 256) f32"
    note = "f = lambda x: jnp.tanh(x) * 2.0 + 1.0"
    if not isinstance(text, str):
        checks.fail(fn, f"{where}: should return a str, got {type(text).__name__}", note=note)
    if not (text.startswith("HloModule") and "ENTRY" in text):
        checks.fail(fn, f"{where}: is not an optimised HLO module ('HloModule ...' with an ENTRY computation); "
                        f"it starts {text[:60]!r}. StableHLO (.lower(...).as_text()) is the program before XLA.",
                    note=note)
    if "fusion(" not in text:
        checks.fail(fn, f"{where}: has no fusion: was it compiled?", note=note)
    count = impl.hlo.count_fusions(text)
    checks.assert_equal(count, 1, fn=impl.hlo.count_fusions, what="the fusions in tanh(x) * 2 + 1",
                        note="the text is optimized_hlo(f, x) of the test")


def _program(ops):
    """A function of x (rows, cols) applying the named elementwise, reduce and dot steps in order."""
    steps = {"tanh": jnp.tanh, "exp": lambda x: jnp.exp(-jnp.abs(x)), "scale": lambda x: x * 3.0 + 1.0,
             "rowsum": lambda x: x - x.sum(axis=1, keepdims=True), "dot": lambda x: x @ x.T @ x / x.shape[1]}

    def f(x):
        for op in ops:
            x = steps[op](x)
        return x
    return f


PROGRAM_STEPS = ("tanh", "exp", "scale", "rowsum", "dot")


def _fusions(text):
    """Fusion instructions of a module: the course's count, as the solution reads it."""
    return len(re.findall(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[^=\n]*?\sfusion\(", text, re.MULTILINE))


def _same_fusions(got, expected):
    if not (isinstance(got, str) and got.startswith("HloModule") and "ENTRY" in got):
        return f"is not an optimised HLO module ('HloModule ...' with an ENTRY); it starts {str(got)[:60]!r}"
    return None if _fusions(got) == expected else (f"the module has {_fusions(got)} fusions; XLA's own for the "
                                                   f"same program has {expected}")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): modules XLA compiled here from programs
    the grader draws, one shipped snippet, and optimized_hlo on a drawn program."""
    cases = []
    for _ in range(2):
        ops = tuple(str(o) for o in rng.choice(PROGRAM_STEPS, size=int(rng.integers(1, 5))))
        x = tst.random_array((int(rng.integers(2, 9)) * 8, int(rng.integers(1, 5)) * 32), "float32",
                             checks.trusted.seed(rng))
        text = checks.trusted.program_text(_program(ops), x, optimized=True)
        cases.append(checks.trusted.exact("count_fusions", (text,), expected=_fusions(text),
                                          what="the fusions it counts",
                                          label=f"count_fusions(XLA's module of {' > '.join(ops)})"))
        cases.append(checks.trusted.exact("optimized_hlo", (checks.trusted.built(_program, ops), x),
                                          expected=_fusions(text), compare=_same_fusions,
                                          label=f"optimized_hlo({' > '.join(ops)}, x{list(x.shape)})"))
    name, text, want = SNIPPETS[int(rng.integers(len(SNIPPETS)))]
    cases.append(checks.trusted.exact("count_fusions", (text,), expected=want, what="the fusions it counts",
                                      label=f"count_fusions(SNIPPETS {name!r})"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
