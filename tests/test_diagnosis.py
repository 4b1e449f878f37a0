"""A wrong result's report names first what the evidence shows: the failing call made again
(never-written memory poisoned otherwise, parallel steps in another order, float32 copies of
the inputs) and evaluated step by step (the first NaN or Inf the arithmetic makes).

Each kernel here carries one of the course's mistakes in a few lines; the first cause the report
names (causes.first_suspect) must be that mistake's.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse import checks, references
from pytest_tpucourse.core.outcomes import WrongResult, headline_of, without_jax_advice
from pytest_tpucourse.diagnosis import causes
from pytest_tpucourse.grading.messages import _useful_notes, same_failure
from pytest_tpucourse.strategies import random_array

COPY = references.Reference("copy", lambda x: x, lambda x: x)
SOFTMAX = references.Reference("softmax", lambda x: jax.nn.softmax(x, axis=-1),
                               lambda x: jax.nn.softmax(x, axis=-1))
MATMUL = references.MATMUL


def graded(function):
    return checks.graded(function, "kernel() in test")


def report(function, args, reference, **kwargs) -> str:
    with pytest.raises(WrongResult) as raised:
        checks.assert_matches_reference(graded(function), args, reference=reference, kwargs=kwargs)
    return raised.value.render()


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def floored_copy(x, *, rows=16):
    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // rows,), in_specs=[spec], out_specs=spec)(x)


def test_a_block_no_grid_step_writes_is_named_with_the_grid_that_misses_it():
    text = report(floored_copy, (random_array((40, 128), "float32", 0),), COPY)
    assert causes.first_suspect(text) == "output block never written"
    assert "1 of the 3 blocks of output 0 of kernel _copy_kernel is never written: block (2, 0) (32..39, " in text
    assert "The grid (2,) reaches 2 of the 3 blocks along the output's axis 0 (40 in blocks of 16)" in text
    assert "uninitialized_memory=\"zero\"), output changes in 1,024 of 5,120 values" in text
    assert "index map" not in text  # the index maps are right: no line of them is named


def _sum_kernel(x_ref, o_ref, acc_ref, *, init: bool):
    k = pl.program_id(1)
    if init:
        @pl.when(k == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]

    @pl.when(k == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def block_sums(x, *, init=True, semantics=("parallel", "arbitrary")):
    """Sums the row blocks of x (2 row blocks of 8 x 128 each per output block)."""
    return pl.pallas_call(
        functools.partial(_sum_kernel, init=init), out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
        grid=(1, x.shape[0] // 8), in_specs=[pl.BlockSpec((8, 128), lambda i, k: (k, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, k: (i, 0)),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)


BLOCK_SUMS = references.Reference("block sums", lambda x: x.reshape(-1, 8, 128).sum(0),
                                  lambda x: x.reshape(-1, 8, 128).sum(0))


def test_a_scratch_read_before_it_is_set_is_proven_and_named():
    text = report(functools.partial(block_sums, init=False), (random_array((32, 128), "float32", 0),),
                  BLOCK_SUMS)
    assert causes.first_suspect(text) == "never-written memory read"
    assert "Memory never written is read: run again with never-written memory filled with 0" in text
    assert "the NaN in output comes from acc_ref (scratch) before anything writes it" in text
    assert "Every output block is written." in text


def test_a_reduction_axis_marked_parallel_is_proven_by_another_order():
    text = report(functools.partial(block_sums, semantics=("parallel", "parallel")),
                  (random_array((32, 128), "float32", 0),), BLOCK_SUMS)
    assert causes.first_suspect(text) == "parallel axis carries state"
    assert "run again with them in another order (TPU interpret mode, random_seed 1" in text
    assert "Grid axis 1 of kernel _sum_kernel is marked \"parallel\"" in text


def _softmax_kernel(x_ref, o_ref):
    e = jnp.exp(x_ref[...])  # no max subtracted
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def softmax_without_max(x):
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_an_overflow_is_named_at_its_line_and_memory_is_ruled_out():
    text = report(softmax_without_max, (random_array((8, 128), "float32", 0, kind="large"),), SOFTMAX)
    assert causes.first_suspect(text) == "overflow"
    assert "The first Inf is an overflow: exp of" in text and "tests/test_diagnosis.py:" in text
    assert "Then inf / inf makes the NaN" in text
    assert "Never-written memory is ruled out" in text


def _normalise_kernel(x_ref, o_ref):
    weight = jnp.zeros_like(x_ref[...])  # a weight that stayed 0
    o_ref[...] = (x_ref[...] * weight) / jnp.sum(weight, axis=-1, keepdims=True)


def test_zero_by_zero_is_named():
    function = functools.partial(pl.pallas_call, _normalise_kernel)
    text = report(lambda x: function(out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
                  (random_array((8, 128), "float32", 0),), COPY)
    assert causes.first_suspect(text) == "0/0"
    assert "The first NaN is 0/0: a division (div) of 0 by 0" in text


def _masked_kernel(x_ref, o_ref):
    m = jnp.full(x_ref.shape, -jnp.inf, jnp.float32)  # a row whose every score is masked
    o_ref[...] = x_ref[...] + (m - jnp.max(m, axis=-1, keepdims=True))


def test_infinities_that_cancel_are_named():
    function = functools.partial(pl.pallas_call, _masked_kernel)
    text = report(lambda x: function(out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
                  (random_array((8, 128), "float32", 0),), COPY)
    assert causes.first_suspect(text) == "inf - inf"


def _matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...]).astype(acc_ref.dtype)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def bf16_accumulator_matmul(x, y):
    m, k = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        _matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(1, 1, k // 128),
        in_specs=[pl.BlockSpec((m, 128), lambda i, j, kk: (0, kk)),
                  pl.BlockSpec((128, n), lambda i, j, kk: (kk, 0))],
        out_specs=pl.BlockSpec((m, n), lambda i, j, kk: (0, 0)),
        scratch_shapes=[pltpu.VMEM((m, n), x.dtype)],  # the input dtype: rounds after every step
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")))(x, y)


def test_rounding_in_bfloat16_is_shown_by_float32_copies_of_the_inputs():
    x, y = random_array((32, 1024), "bfloat16", 0), random_array((1024, 128), "bfloat16", 1)
    text = report(bf16_accumulator_matmul, (x, y), MATMUL)
    assert causes.first_suspect(text) == "precision"
    assert "Rounding in bfloat16: run again on float32 copies of the same inputs, output is right" in text


def test_a_wrong_formula_gets_no_suspect_it_has_no_evidence_for():
    text = report(lambda x: floored_copy(x * 3, rows=8), (random_array((16, 128), "float32", 0),), COPY)
    assert causes.first_suspect(text) == "wrong values"
    assert "Rounding" not in text and "order" not in text


def test_the_evidence_is_gathered_once_when_the_report_is_written_and_never_breaks_it():
    calls = []

    def evidence():
        calls.append(1)
        raise RuntimeError("a replay that fails")

    failure = WrongResult("f() in x.py: output is wrong.", evidence=evidence, suffix="\n  reproduce (python):")
    assert calls == [] and failure.message == "f() in x.py: output is wrong.\n  reproduce (python):"
    assert failure.render() == failure.message and failure.render() == failure.message
    assert calls == [1]
    noted = WrongResult("f(): wrong.", evidence=lambda: ["Evidence."], suffix="\n  reproduce").with_suffix(" (mode)")
    assert noted.render() == "f(): wrong.\n  Evidence.\n  reproduce (mode)"


def test_the_first_suspect_is_the_cause_named_earliest():
    assert causes.first_suspect("out has 3 NaN.\n  The first NaN is 0/0 ... Memory never written is read") == "0/0"
    assert causes.first_suspect("f() raised:\n  IndexError: Out-of-bounds block index (1, 0)") == \
        "out-of-bounds block index"
    assert causes.first_suspect("all good") is None
    assert len(set(causes.NAMES)) == len(causes.NAMES)


def test_no_summary_line_ends_on_a_bare_colon():
    assert headline_of("f() raised:\n  ValueError: bad") == "f() raised: ValueError: bad"
    assert headline_of("f() lets a copy land:") == "f() lets a copy land"


def test_a_headline_goes_on_past_every_line_that_ends_on_a_colon():
    report = ("predict_verdict(...) predicted 'ok'; the compiler says 'mosaic':\n"
              "  the v5e compiler rejects kernel k (Mosaic):\n    Mosaic failed to compile TPU kernel: i8")
    assert headline_of(report) == ("predict_verdict(...) predicted 'ok'; the compiler says 'mosaic': the v5e "
                                   "compiler rejects kernel k (Mosaic): Mosaic failed to compile TPU kernel: i8")


def test_jax_advice_to_file_a_bug_is_left_out_of_a_toolchain_refusal():
    said = ("Pallas encountered an internal verification error. Please file a bug at "
            "https://github.com/jax-ml/jax/issues/new/choose. Error details: 'tpu.matmul' op Expected 32-bit\n"
            "  Unimplemented primitive in Pallas TPU lowering for tc: cumsum. Please file an issue at "
            "https://github.com/jax-ml/jax/issues/new/choose.")
    assert without_jax_advice(said) == ("Error details: 'tpu.matmul' op Expected 32-bit\n"
                                        "  Unimplemented primitive in Pallas TPU lowering for tc: cumsum.")
    assert checks.toolchain_words(ValueError(said), 1) == "Error details: 'tpu.matmul' op Expected 32-bit\n..."


GRADED_TEST_WITH_ASSERTS = """
    from hypothesis import example, given, strategies as st

    @given(n=st.integers(1, 3))
    @example(n=2)
    def test_double_counts(impl, request, n):
        got = impl.double.double(n)
        assert got == 2 * n, f"{impl.double.double.display}: double({n}) returned {got!r}, expected {2 * n}"

    def test_double_of_one(impl):
        assert impl.double.double(1) == 2
"""


def test_a_graded_test_files_own_assert_reports_in_the_course_words(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    return x * 3\n")
    fake_course.test_file(GRADED_TEST_WITH_ASSERTS)
    result = fake_course.run()
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["double() in exercises/ch11/double.py: double(2) returned 6, expected 4",
                                 "  the failing case: n=2"])
    assert "the failing case: request=" not in output  # a fixture is no drawn value
    # No message: the assertion, where the test file makes it, in one line.
    result.stdout.fnmatch_lines(["the check at exercises/ch11/test_double.py:11 failed: assert 3 == 2"])
    for pytest_own in ("Failing explicit example", "AssertionError", "E       ", "test_double.py:8: "):
        assert pytest_own not in output, pytest_own


def test_an_assert_in_the_learners_code_is_not_taken_for_the_tests_own(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    assert x < 0, 'only negatives'\n    return 2 * x\n")
    fake_course.test_file(GRADED_TEST_WITH_ASSERTS)
    output = fake_course.run().stdout.str()
    assert "the check at" not in output and "only negatives" in output


def test_a_drawn_example_is_one_line_in_the_course_words():
    notes = ["Failing explicit example: test_ring(\n    case=(8, 1, (64, 128), 'float32'),\n    seed=0,\n)"]
    assert _useful_notes(notes) == ["  the failing case: case=(8, 1, (64, 128), 'float32'), seed=0"]


def test_failures_that_differ_only_in_their_numbers_are_one_failure():
    one = "f(): output has 1,024 NaN of 5,120 values (the first at [32, 0])\n  reproduce (python, at x):\n  a"
    two = "f(): output has 2,048 NaN of 10,240 values (the first at [64, 0])\n  reproduce (python, at y):\n  b"
    assert same_failure(one) == same_failure(two)
    assert same_failure(one) != same_failure("f(): output has dtype float32, expected bfloat16.")


def test_a_kernel_step_evaluation_follows_program_ids():
    """The stepping evaluator runs a kernel's body as the generic interpreter would: the block
    computed step by step equals the kernel's own result."""
    from pytest_tpucourse.diagnosis import kernel_steps
    from pytest_tpucourse.readers import traced_program

    x = random_array((32, 128), "float32", 0)
    eqn = traced_program.pallas_call_eqns(jax.make_jaxpr(block_sums)(x))[0]
    operands = kernel_steps.operands_of(eqn, [x])
    assert kernel_steps.writes_per_block(eqn, operands) == [{(0, 0): 1}]
    run = kernel_steps.first_made(eqn, operands, 0, (0, 0))
    assert run.made == {} and not run.element_nan
    unset = kernel_steps.unwritten_reads(eqn, operands, 0, (0, 0))
    assert unset.labels == frozenset() and not unset.element_nan
    np.testing.assert_allclose(np.asarray(block_sums(x)), np.asarray(x).reshape(4, 8, 128).sum(0), rtol=1e-6)


def test_every_mutant_of_a_kernel_chapter_names_its_cause_from_the_vocabulary():
    from pytest_tpucourse.run.mutants import load_mutants

    from .support import KERNEL_CHAPTERS, REPO

    for chapter in KERNEL_CHAPTERS:
        for mutant in load_mutants(REPO / "tests" / "mutants" / f"{chapter}.toml"):
            assert mutant.cause in causes.NAMES, f"{chapter}.{mutant.name}: cause {mutant.cause!r}"


def test_the_first_failure_and_the_noise_are_read_off_a_run():
    from .support import first_failure, noise

    output = ("x\n=== FAILURES ===\n____ test_a ____\nf(): output has 1 NaN.\n  The first NaN is 0/0: a div.\n"
              "  reproduce (python, at the course root):\n    out = f()\n____ test_b ____\nother\n"
              "=== tpucourse ===\n  FAIL  f\n        f() raised:\ncourse: 0/15 chapters\n")
    assert first_failure(output) == "f(): output has 1 NaN.\n  The first NaN is 0/0: a div."
    assert noise(output) == ["a line ending on a bare colon: 'f() raised:'"]
    assert noise("  RACE DETECTED\n    clock: <NpVectorClock object at 0x1>") == [
        "raw text: 'RACE DETECTED'", "raw text: 'NpVectorClock'"]


def test_docs_list_every_cause_with_its_meaning():
    from .support import REPO

    text = (REPO / "docs" / "authoring.md").read_text(encoding="utf-8")
    for cause in causes.CAUSES:
        assert f"| {cause.name} | {cause.meaning} |" in text, cause.name
