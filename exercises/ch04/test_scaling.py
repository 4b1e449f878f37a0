"""Graded tests for ch04.scaling: bytes_accessed(fn, *args), fit_exponent(ns, values)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

SEQ_LENS = (256, 512, 1024, 2048)
# The sequence lengths each backend's sweep compiles naive attention and layer norm at (one head, D = 64,
# f32): where the S² term of attention's traffic dominates its linear terms. XLA:TPU moves 12 bytes per
# score and about 3,100 per row, so its S² term leads only from S = 1024; over 256..2048 its bytes fit
# S^1.72 (exercises/ch04/facts/v5e.json).
BACKEND_SWEEPS = {"cpu": SEQ_LENS, "tpu": (1024, 2048, 4096, 8192)}
ATTENTION_EXPONENT = (1.8, 2.2)
ROW_OP_EXPONENT = (0.8, 1.2)
# Sweeps of n: doubling, and uneven (a fit that uses two of the points, or regresses log n on
# log value and inverts the slope, agrees with the least-squares slope only where the points lie
# exactly on a line).
FIT_SWEEPS = ((64, 128, 256, 512, 1024, 2048), (32, 48, 100, 640, 700, 4096))
TOLERANCE = 1e-6  # relative and absolute: float64 least squares, however it is solved


def least_squares_slope(ns, values) -> float:
    """The slope of the least-squares line through (log n, log value)."""
    return float(np.polyfit(np.log(np.asarray(ns, np.float64)), np.log(np.asarray(values, np.float64)), 1)[0])


def _check_fit(impl, ns, values, described):
    fn = impl.scaling.fit_exponent
    got = fn(ns, values)
    want = least_squares_slope(ns, values)
    if not (isinstance(got, (float, np.floating)) and abs(got - want) <= TOLERANCE * max(1.0, abs(want))):
        checks.fail(fn, f"{fn.display} returns {got!r} for {described}, expected the least-squares slope of "
                        f"log(values) on log(n), {want:.6f} (within {TOLERANCE:g})")


@given(p=st.floats(0.5, 3.0), c=st.floats(1e-3, 1e6), noise=tst.few(0.0, 0.02), ns=tst.few(*FIT_SWEEPS),
       seed=tst.seeds())
@example(p=2.0, c=3.0, noise=0.0, ns=FIT_SWEEPS[0], seed=0)
@example(p=1.5, c=0.02, noise=0.02, ns=FIT_SWEEPS[1], seed=1)
def test_fit_exponent_is_the_least_squares_slope(impl, p, c, noise, ns, seed):
    """Exact powers give p itself; with 2% log-normal noise the points leave the line, and only the
    least-squares slope of all of them is the answer."""
    ns = np.array(ns, dtype=np.float64)
    values = c * ns ** p * np.exp(np.random.default_rng(seed).normal(0.0, noise, ns.size))
    _check_fit(impl, ns, values, f"values = {c:.3g} * n**{p:.4f} (log-normal noise {noise}) over n = "
                                 f"{tuple(int(n) for n in ns)}")


def test_fit_exponent_with_a_lower_order_term(impl):
    """n² + 256·n: the least-squares slope over the whole sweep is 1.725; the ratio of the
    first two points alone says 1.585, and the two end points 1.723."""
    ns = np.array(SEQ_LENS, dtype=np.float64)
    _check_fit(impl, ns, ns ** 2 + 256 * ns, f"n² + 256·n over {SEQ_LENS}")


def test_bytes_accessed_is_xlas_estimate(impl):
    x = tst.random_array((256, 512), "float32", 0)
    f = lambda x: jnp.tanh(x) * 2.0  # noqa: E731
    fn = impl.scaling.bytes_accessed
    got = fn(f, x)
    want = jax.jit(f).lower(x).compile().cost_analysis()["bytes accessed"]
    if got != pytest.approx(want):
        checks.fail(fn, f"{fn.display} gives {got} for tanh(x) * 2 on x(256, 512) f32; XLA's cost analysis says "
                        f"{want} bytes accessed (one read and one write of 512 KiB)",
                    note="f = lambda x: jnp.tanh(x) * 2.0")


def _sweep(impl, function, seq_lens):
    values = []
    for n in seq_lens:
        q = jax.ShapeDtypeStruct((1, 1, n, 64), jnp.float32)
        values.append(impl.scaling.bytes_accessed(function, q, q, q))
    return values


def test_naive_attention_bytes_grow_as_n_squared(impl):
    seq_lens = checks.for_this_backend(BACKEND_SWEEPS)
    values = _sweep(impl, references.attention_floor, seq_lens)
    p = impl.scaling.fit_exponent(np.array(seq_lens), np.array(values))
    if not ATTENTION_EXPONENT[0] <= p <= ATTENTION_EXPONENT[1]:
        checks.fail(impl.scaling.fit_exponent,
                    f"naive attention's bytes accessed {values} over S = {seq_lens} (D = 64) fit S**{p:.2f}; "
                    f"expected an exponent in [1.8, 2.2]: the (S, S) scores are written and read back")


def test_a_row_op_bytes_grow_linearly(impl):
    """The same instrument on layer norm of (S, 64): no S² buffer, exponent ~1."""
    def row_op(q, k, v):
        return references.LAYERNORM.floor(q, k[0, 0, 0], v[0, 0, 0])
    seq_lens = checks.for_this_backend(BACKEND_SWEEPS)
    values = _sweep(impl, row_op, seq_lens)
    p = impl.scaling.fit_exponent(np.array(seq_lens), np.array(values))
    if not ROW_OP_EXPONENT[0] <= p <= ROW_OP_EXPONENT[1]:
        checks.fail(impl.scaling.fit_exponent,
                    f"layer norm's bytes accessed {values} over S = {seq_lens} fit S**{p:.2f}, expected ~1")


def _tanh_program():
    return lambda x: jnp.tanh(x) * 2.0


def _bytes_accessed(x):
    return jax.jit(_tanh_program()).lower(x).compile().cost_analysis()["bytes accessed"]


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): exponents and a sweep the grader draws,
    and XLA's bytes for a drawn shape."""
    cases = []
    for noise in (0.0, 0.02):
        p, c = float(rng.uniform(0.5, 3.0)), float(10 ** rng.uniform(-3, 6))
        ns = np.array(sorted(rng.choice(np.arange(32, 4097), size=6, replace=False)), dtype=np.float64)
        values = c * ns ** p * np.exp(rng.normal(0.0, noise, ns.size))
        cases.append(checks.trusted.exact("fit_exponent", (ns, values), expected=least_squares_slope(ns, values),
                                          compare=checks.trusted.close(rtol=TOLERANCE, atol=TOLERANCE),
                                          label=f"fit_exponent(ns, {c:.3g} * ns**{p:.4f}, noise {noise})"))
    x = tst.random_array((int(rng.integers(1, 65)) * 8, int(rng.integers(1, 9)) * 128), "float32",
                         checks.trusted.seed(rng))
    cases.append(checks.trusted.exact("bytes_accessed", (checks.trusted.built(_tanh_program), x),
                                      expected=lambda f, x: _bytes_accessed(x), compare=checks.trusted.close(),
                                      label=f"bytes_accessed(tanh(x) * 2, x{list(x.shape)})"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
