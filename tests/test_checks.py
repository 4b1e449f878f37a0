"""The shared checker rejects every kind of wrong result, and says why, briefly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from pytest_tpucourse import checks, references
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.checks import CheckerError
from pytest_tpucourse.core.outcomes import LearnerCodeError, WrongResult

F32 = np.float32


def graded(function):
    return checks.graded(function, "kernel() in test")


FN = graded(lambda: None)
REF = np.arange(1.0, 7.0).reshape(2, 3)


def test_a_correct_result_passes():
    checks.assert_close(REF.astype(F32), REF, fn=FN, dtype=F32)


@pytest.mark.parametrize("actual, message", [
    (REF.astype(F32)[:, :2], "has shape (2, 2), expected (2, 3)"),
    (REF.astype(np.float64), "has dtype float64, expected float32"),
    ([1.0, 2.0], "should be an array of shape (2, 3) and dtype float32, got list"),
    (np.where(REF > 5, np.nan, REF).astype(F32), "has 1 NaN of 6 values (the first at [1, 2]: nan where "
                                                  "the reference is 6)"),
    (np.where(REF > 5, np.inf, REF).astype(F32), "has 1 Inf of 6 values"),
    ((REF * 1.01).astype(F32), "relative error 1.00e-02 > bound 1.00e-05"),
])
def test_wrong_results_are_rejected_with_the_reason(actual, message):
    with pytest.raises(WrongResult, match=None) as caught:
        checks.assert_close(actual, REF, fn=FN, dtype=F32, note="shape (2, 3), seed 0")
    assert message in caught.value.message
    assert "kernel() in test: output" in caught.value.message
    assert "note: shape (2, 3), seed 0" in caught.value.message


def test_the_worst_element_is_named():
    actual = REF.astype(F32).copy()
    actual[1, 1] += 1.0
    with pytest.raises(WrongResult) as caught:
        checks.assert_close(actual, REF, fn=FN, dtype=F32)
    assert "worst element [1, 1]: got 6, expected 5" in caught.value.message


def test_non_finite_values_pass_only_where_the_reference_has_them():
    ref = np.array([1.0, -np.inf, np.nan, 2.0])
    checks.assert_close(np.array([1.0, -np.inf, np.nan, 2.0], F32), ref, fn=FN, dtype=F32)
    with pytest.raises(WrongResult, match="is 0 at \\[1\\] where the reference is -inf"):
        checks.assert_close(np.array([1.0, 0.0, np.nan, 2.0], F32), ref, fn=FN, dtype=F32)
    with pytest.raises(WrongResult, match="1 Inf of 4 values"):
        checks.assert_close(np.array([1.0, np.inf, np.nan, 2.0], F32), ref, fn=FN, dtype=F32)


def test_integer_outputs_must_be_exact():
    ref = np.array([3, 1, 2])
    checks.assert_close(np.array([3, 1, 2], np.int32), ref, fn=FN, dtype=np.int32)
    with pytest.raises(WrongResult, match="differs in 1 of 3 entries \\(first at \\[2\\]: got 5, expected 2\\)"):
        checks.assert_close(np.array([3, 1, 5], np.int32), ref, fn=FN, dtype=np.int32)


def test_zero_size_arrays_compare_by_shape_and_dtype():
    checks.assert_close(np.zeros((0, 4), F32), np.zeros((0, 4)), fn=FN, dtype=F32)
    with pytest.raises(WrongResult, match="has shape"):
        checks.assert_close(np.zeros((0, 3), F32), np.zeros((0, 4)), fn=FN, dtype=F32)


def test_the_floor_error_widens_the_bound_and_a_per_test_tol_replaces_it():
    actual = (REF * 1.002).astype(F32)
    with pytest.raises(WrongResult):
        checks.assert_close(actual, REF, fn=FN, dtype=F32)
    checks.assert_close(actual, REF, fn=FN, dtype=F32, floor=(REF * 1.003).astype(F32))
    checks.assert_close(actual, REF, fn=FN, dtype=F32, tol=3e-3)


# ------------------------------------------------------- whole calls and pytrees

SQUARE = references.Reference("square", lambda x: x * x, lambda x: x * x)


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * x_ref[...]


def pallas_square(x):
    return pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


X = jnp.linspace(-2.0, 2.0, 8 * 128, dtype=jnp.float32).reshape(8, 128)


def test_a_pallas_kernel_matching_the_oracle_passes():
    checks.assert_matches_reference(graded(pallas_square), (X,), reference=SQUARE)


def test_a_function_without_a_kernel_is_rejected_as_a_cheat():
    with pytest.raises(WrongResult, match="contains no pallas_call: it computes the answer with mul"):
        checks.assert_matches_reference(graded(lambda x: x * x), (X,), reference=SQUARE)
    checks.assert_matches_reference(graded(lambda x: x * x), (X,), reference=SQUARE,
                                    require_kernel=False)


def test_a_wrong_pytree_is_its_own_failure():
    two = references.Reference("pair", lambda x: (x * x, x), lambda x: (x * x, x))
    with pytest.raises(WrongResult, match=r"returned 1 array\(s\) .* expected 2 array\(s\) .*\(out, x\)"):
        checks.assert_matches_reference(graded(pallas_square), (X,), reference=two,
                                        names=("out", "x"))


def test_outputs_are_checked_and_named_one_by_one():
    two = references.Reference("pair", lambda x: (x * x, x + 1), lambda x: (x * x, x + 1))
    with pytest.raises(WrongResult, match="kernel\\(\\) in test: lse has dtype"):
        checks.assert_matches_reference(graded(lambda x: (pallas_square(x), (x + 1).astype(jnp.bfloat16))),
                                        (X,), reference=two, names=("out", "lse"))


def test_an_oracle_that_raises_is_a_bug_in_the_test_not_the_kernel():
    def broken(x):
        raise KeyError("oops")
    with pytest.raises(CheckerError, match="the graded test's oracle raised KeyError.*a bug in the test"):
        checks.assert_matches_reference(graded(pallas_square), (X,),
                                        reference=references.Reference("broken", broken, SQUARE.floor))


def test_code_under_grading_that_raises_is_a_short_learner_error():
    def raises(x):
        raise ValueError("bad block")
    with pytest.raises(LearnerCodeError, match="ValueError: bad block"):
        checks.assert_matches_reference(graded(raises), (X,), reference=SQUARE, require_kernel=False)


# ------------------------------------------------------- grads

def _sum_product(x, y):
    return (x * y).sum(axis=-1)


PRODUCT = references.Reference("sum_product", _sum_product, _sum_product)


def _custom(scale_dx=1.0, scale_dy=1.0):
    @jax.custom_vjp
    def f(x, y):
        return _sum_product(x, y)

    def fwd(x, y):
        return f(x, y), (x, y)

    def bwd(res, g):
        x, y = res
        return (g[:, None] * y * scale_dx, g[:, None] * x * scale_dy)

    f.defvjp(fwd, bwd)
    return f


XY = (jnp.asarray(np.random.default_rng(0).standard_normal((8, 16)), jnp.float32),
      jnp.asarray(np.random.default_rng(1).standard_normal((8, 16)), jnp.float32))


def test_correct_grads_pass_including_the_custom_vjp_consistency_check():
    checks.assert_grads_match(graded(_custom()), XY, reference=PRODUCT, argnames=("dx", "dy"))


def test_each_grad_is_checked_and_named_on_its_own():
    with pytest.raises(WrongResult, match="grad dy is wrong"):
        checks.assert_grads_match(graded(_custom(scale_dy=1.5)), XY, reference=PRODUCT,
                                  argnames=("dx", "dy"))
    checks.assert_grads_match(graded(_custom(scale_dy=1.5)), XY, reference=PRODUCT,
                              argnames=("dx", None), check_custom_vjp=False)


def test_a_backward_inconsistent_with_its_forward_fails_check_grads():
    with pytest.raises(WrongResult, match="custom_vjp backward disagrees with numerical differentiation"):
        checks.assert_grads_match(graded(_custom(scale_dx=1.5)), XY, reference=PRODUCT,
                                  argnames=("dx", "dy"), tol=1.0)


def test_argnames_must_cover_every_input():
    with pytest.raises(CheckerError, match="must name each of the 2 inputs"):
        checks.assert_grads_match(graded(_custom()), XY, reference=PRODUCT, argnames=("dx",))


# ------------------------------------------------------- checks a TPU would otherwise do first

def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def blocked_copy(x, block=(8, 128)):
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // block[0], x.shape[1] // block[1]),
                          in_specs=[spec], out_specs=spec)(x)


# compile_ahead=True exports the program (a TPU lowering and more) and starts its compile; the
# verdicts are the plain lowering's either way.
AHEAD = pytest.mark.parametrize("compile_ahead", [False, True], ids=["lowered", "exported-ahead"])


@AHEAD
def test_tpu_lowering_accepts_legal_blocks_and_names_an_illegal_one(compile_ahead):
    x = jnp.zeros((16, 256), jnp.float32)
    tpu_rules.assert_lowers_for_tpu(graded(blocked_copy), x, compile_ahead=compile_ahead)
    with pytest.raises(WrongResult, match=r"(?s)would not compile for a TPU.*The BlockSpec at .*test_checks.py:"
                                          r"\d+ cuts input 0 .*dimension -1 of the block is 64: neither a "
                                          r"multiple of 128 \(lanes\)"):
        tpu_rules.assert_lowers_for_tpu(graded(blocked_copy), x, block=(8, 64), compile_ahead=compile_ahead)


def test_a_calls_lowering_check_and_compile_check_export_its_program_once(monkeypatch):
    """With the real compiler installed the lowering check is an export for the chip, kept for the
    run: the compile check of the same call (same function, shapes, keywords and chip) compiles that
    export instead of tracing and lowering the program again; another call's keywords export anew."""
    from pytest_tpucourse.compiler import libtpu

    libtpu.skip_unless_available()
    exports = []
    export = libtpu._ExportedProgram.of.__func__
    monkeypatch.setattr(libtpu._ExportedProgram, "of",
                        classmethod(lambda cls, *a: exports.append(a[2]) or export(cls, *a)))
    x = jnp.zeros((16, 256), jnp.float32)
    try:
        tpu_rules.assert_lowers_for_tpu(graded(blocked_copy), x)
        tpu_rules.assert_compiles_for(graded(blocked_copy), x)
        assert len(exports) == 1
        tpu_rules.assert_compiles_for(graded(blocked_copy), x, block=(16, 128))
        assert len(exports) == 2 and exports[-1] == {"block": (16, 128)}
    finally:
        libtpu.forget_exports()
    tpu_rules.assert_lowers_for_tpu(graded(blocked_copy), x)  # the run over: exported again
    libtpu.forget_exports()
    assert len(exports) == 3


def test_a_program_the_export_refuses_gets_the_plain_lowerings_verdict_with_compile_ahead():
    """A host callback beside the kernel: jax.export refuses it, and so does the TPU lowering, for
    its own reason; the lowering check says the lowering's, whether or not it exported first."""
    from jax.experimental import io_callback

    def copy_after_a_callback(x):
        x = io_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return blocked_copy(x)

    verdicts = []
    for compile_ahead in (False, True):
        with pytest.raises(WrongResult) as caught:
            tpu_rules.assert_lowers_for_tpu(graded(copy_after_a_callback), jnp.zeros((16, 256), jnp.float32),
                                            compile_ahead=compile_ahead)
        verdicts.append(str(caught.value))
    assert verdicts[0] == verdicts[1] and "the platform for the specified backend cpu" in verdicts[0]


@AHEAD
def test_tpu_lowering_names_an_unsupported_primitive(compile_ahead):
    def cumsum_kernel(x_ref, o_ref):
        o_ref[...] = jnp.cumsum(x_ref[...], axis=1)

    def cumsum(x):
        return pl.pallas_call(cumsum_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    with pytest.raises(WrongResult, match=r"`cumsum` has no Mosaic \(TPU\) lowering: a kernel cannot use it"):
        tpu_rules.assert_lowers_for_tpu(graded(cumsum), jnp.zeros((8, 128), jnp.float32), compile_ahead=compile_ahead)


def test_a_race_between_two_cores_is_reported():
    from jax.experimental.pallas import tpu as pltpu

    def racy(x):  # every grid step writes the same output block, and the axis is "parallel"
        return pl.pallas_call(
            _copy_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)

    x = jnp.ones((32, 128), jnp.float32)
    with pytest.raises(WrongResult, match="data race") as raised:
        tpu_rules.assert_no_races(graded(racy), x)
    # The detector's dump is said once, in the course's words: never raw, never its vector clocks.
    message = raised.value.render()
    assert "The race detector saw 1 race; the first: two writes of one HBM block [0:8, 0:128], by cores" in message
    assert "RACE DETECTED" not in message and "clock" not in message
    assert message.count("Grid axis 0 is marked") == 1
    tpu_rules.assert_no_races(graded(blocked_copy), x)


def _rowsums_keeping_state(*, state_in_output: bool, return_state: bool = False):
    """Row sums of each of 2 heads over 2 column steps (head axis "parallel", steps "arbitrary"),
    the running sum kept in an (8, 128) block: an output at block (0, 0) of every step, as jax
    0.10.2's splash attention keeps its running max and sum, or scratch."""
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(1) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += x_ref[0]

        @pl.when(pl.program_id(1) == 1)
        def _flush():
            o_ref[0] = acc_ref[...]

    out = jax.ShapeDtypeStruct((2, 8, 128), jnp.float32)
    specs = dict(grid=(2, 2), in_specs=[pl.BlockSpec((1, 8, 128), lambda h, j: (h, 0, j))],
                 compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")))
    if not state_in_output:
        return lambda x: pl.pallas_call(kernel, out_shape=out, out_specs=pl.BlockSpec((1, 8, 128), lambda h, j: (h, 0, 0)),
                                        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)], **specs)(x)

    def call(x):
        o, state = pl.pallas_call(
            kernel, out_shape=(out, jax.ShapeDtypeStruct((8, 128), jnp.float32)),
            out_specs=(pl.BlockSpec((1, 8, 128), lambda h, j: (h, 0, 0)), pl.BlockSpec((8, 128), lambda h, j: (0, 0))),
            **specs)(x)
        return (o, state) if return_state else o
    return call


def test_a_race_on_state_kept_in_an_output_nothing_reads_names_scratch():
    """Two cores write back the (0, 0) block of a state output (the head axis is "parallel"): a real
    race, which the check reports (jax 0.10.2's splash forward has it: chapter 15's README). Where
    the program never reads that output the report says so, and points to scratch_shapes, not to
    an "arbitrary" axis; the same kernel with its state in scratch has no race."""
    x = jnp.arange(2 * 8 * 256, dtype=jnp.float32).reshape(2, 8, 256)
    dropped = _rowsums_keeping_state(state_in_output=True)
    with pytest.raises(WrongResult, match="data race") as raised:
        tpu_rules.assert_no_races(graded(dropped), x)
    message = raised.value.render()
    assert "The program never reads output 1 after the call: it is the kernel's working state" in message
    assert "Keep that state in scratch_shapes (each core has its own), and axis 0 can stay \"parallel\"" in message
    assert "The race detector saw 1 race; the first: two writes of one HBM block [0:8, 0:128]" in message
    # Returned, the state is a result: the ignored axis is named as a reduction, as for any output.
    from pytest_tpucourse.grading.messages import parallel_axes_outputs_ignore

    (line,) = parallel_axes_outputs_ignore(jax.make_jaxpr(_rowsums_keeping_state(state_in_output=True, return_state=True))(x))
    assert "mark it \"arbitrary\"" in line and "never reads" not in line
    tpu_rules.assert_no_races(graded(_rowsums_keeping_state(state_in_output=False)), x)


def test_results_that_depend_on_the_order_of_parallel_steps_are_reported():
    """Where no core boundary splits the steps that share a block, the detector sees no race;
    two interpreter seeds run the parallel steps in two orders, and the results differ."""
    from jax.experimental.pallas import tpu as pltpu

    def last_step_wins(x):  # each of 4 parallel steps overwrites the one output block
        return pl.pallas_call(
            _copy_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(x)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    with pytest.raises(WrongResult, match="gives different results when its parallel grid steps "
                                          "run in another order"):
        tpu_rules.assert_no_races(graded(last_step_wins), x, cores=1, seeds=(0, 1, 2))
    tpu_rules.assert_no_races(graded(blocked_copy), x, cores=1, seeds=(0, 1, 2))


def test_inputs_named_none_may_be_masks_or_integers():
    def masked_sum(x, mask):
        return jnp.where(mask, x, 0.0).sum(axis=-1)

    masked = references.Reference("masked_sum", masked_sum, masked_sum)
    x = XY[0]
    mask = jnp.arange(16)[None, :] % 3 == 0
    checks.assert_grads_match(graded(masked_sum), (x, jnp.broadcast_to(mask, x.shape)),
                              reference=masked, argnames=("dx", None))


# ---------------------------------------------------------------- compiled or eager


def test_python_control_flow_on_values_still_grades_eagerly():
    """Graded code is compiled first; code that cannot be traced runs as written."""
    def branchy(x):
        if float(x[0, 0]) < 0:  # a Python decision on a value: untraceable
            return x * x
        return -x
    checks.assert_matches_reference(graded(branchy), (X,), reference=SQUARE, require_kernel=False)


def test_numpy_and_python_arguments_keep_their_eager_meaning():
    from pytest_tpucourse.grading.calls import GradedFunction

    big = GradedFunction(lambda m, k, n: 2 * m * k * n, "flops() in test")
    assert big(4096, 4096, 4096) == 2 * 4096 ** 3  # traced, int32 would overflow


# ---------------------------------------------------------------- refusals


def _refuses(length, block=128):
    if length % block:
        raise ValueError(f"length {length} is not a multiple of the block {block}")
    return jnp.zeros(length)


def test_a_documented_refusal_passes_and_must_name_its_reasons():
    checks.assert_rejects(graded(_refuses), (200,), mentions=("200", "128"))
    with pytest.raises(WrongResult, match="does not name '64'"):
        checks.assert_rejects(graded(_refuses), (200,), mentions=("200", "64"))


def test_accepting_or_failing_otherwise_is_not_a_refusal():
    with pytest.raises(WrongResult, match="returned a result; expected it to refuse these inputs "
                                          "with a ValueError naming '256'"):
        checks.assert_rejects(graded(_refuses), (256,), mentions=("256",))
    with pytest.raises(WrongResult, match="(?s)raised TypeError: .*expected a ValueError"):
        checks.assert_rejects(graded(lambda n: n + "x"), (3,))


# ---------------------------------------------------------------- what a kernel fetches


def test_fetch_log_counts_a_copy_wherever_the_block_index_changes():
    from pytest_tpucourse.readers import block_skipping

    def rows_twice(x):  # grid (2, 3): the input block follows i only, so j repeats it
        return pl.pallas_call(
            _copy_kernel, out_shape=jax.ShapeDtypeStruct((16, 384), x.dtype), grid=(2, 3),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)))(x)

    (fetches,) = block_skipping.fetch_log(jax.make_jaxpr(rows_twice)(jnp.zeros((16, 128))))
    assert fetches.copies == 2 and fetches.blocks == {(0, 0), (1, 0)}
    assert fetches.starts == {(0, 0), (8, 0)} and fetches.block_sizes == (8, 128)
    assert block_skipping.unconditional_matmuls(jax.make_jaxpr(rows_twice)(jnp.zeros((16, 128)))) == 0


def test_tpu_lowering_of_rules_that_ask_the_chip_generation():
    """Integer // lowers through `sign`, whose rule asks the local TPU's generation: on a CPU
    the check lowers for the run's chip (v5e by default) instead of failing on the device kind."""
    def halved_rows(x):
        spec = pl.BlockSpec((8, 128), lambda i: ((i * 2) // 2, 0))
        return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec], out_specs=spec)(x)

    tpu_rules.assert_lowers_for_tpu(graded(halved_rows), jnp.zeros((16, 128), jnp.float32))


def test_fetch_log_follows_index_maps_that_read_tables_built_from_constants():
    """A scalar-prefetch table the program builds from constants (as splash attention's mask
    tables are) is evaluated; the log reports the blocks the table selects."""
    from jax.experimental.pallas import tpu as pltpu
    from pytest_tpucourse.readers import block_skipping

    def gather_rows(x):  # step i copies the row block table[i]: 2, 0, 0, 1
        table = jnp.array([2, 0, 0, 1], jnp.int32)
        spec = pl.BlockSpec((8, 128), lambda i, t: (t[i], 0))
        return pl.pallas_call(
            lambda t, x_ref, o_ref: _copy_kernel(x_ref, o_ref),
            out_shape=jax.ShapeDtypeStruct((32, 128), x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(4,), in_specs=[spec],
                out_specs=pl.BlockSpec((8, 128), lambda i, t: (i, 0))))(table, x)

    (fetches,) = block_skipping.fetch_log(jax.make_jaxpr(gather_rows)(jnp.zeros((24, 128))))
    assert fetches.copies == 3 and fetches.blocks == {(2, 0), (0, 0), (1, 0)}


def test_an_intermediate_as_large_as_the_one_the_kernel_exists_to_avoid_is_reported():
    from pytest_tpucourse.readers import traced_program

    def outer_then_sum(a, b):
        return jnp.outer(a, b).sum(axis=1)

    a = jnp.ones((64,), jnp.float32)
    with pytest.raises(WrongResult, match=r"computes a float32\[64, 64\] array \(4,096 elements, from "
                                          r"(mul|dot_general)\) outside its Pallas kernels"):
        traced_program.assert_no_value_as_large_as(graded(outer_then_sum), (a, a), elements=64 * 64,
                                              what="the outer product")
    traced_program.assert_no_value_as_large_as(graded(lambda a, b: a * b), (a, a), elements=64 * 64,
                                          what="the outer product")


def test_grid_steps_are_counted_over_any_grid_and_a_short_grid_is_reported():
    from pytest_tpucourse.readers import traced_program

    x = jnp.zeros((32, 512), jnp.float32)
    extents = {"M/bm": 4, "N/bn": 4}
    traced_program.assert_grid_steps(graded(blocked_copy), (x,), extents=extents)

    def one_axis_copy(a):  # the same 16 blocks on one grid axis
        spec = pl.BlockSpec((8, 128), lambda t: (t // 4, t % 4))
        return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(16,),
                              in_specs=[spec], out_specs=spec)(a)

    traced_program.assert_grid_steps(graded(one_axis_copy), (x,), extents=extents)
    with pytest.raises(WrongResult, match=r"kernel\(\) in test walks 2 grid steps \(a grid of \(1, 2\)\); "
                                          r"the schedule walks \(M/bm\) · \(N/bn\) = 4 · 4 = 16, one step per "
                                          r"block\. bn ignored"):
        traced_program.assert_grid_steps(graded(lambda a: blocked_copy(a, block=(32, 256))), (x,),
                                         extents=extents, why="bn ignored")


def test_block_and_dimension_cases_for_graded_shapes():
    from pytest_tpucourse import strategies as tst

    assert tst.dims_around(128, tile=8) == {"below": 64, "equal": 128, "above": 384, "ragged": 264}
    assert tst.unequal_blocks(("bm", "bk", "bn"), (64, 128, 256)) == [
        dict(bm=64, bk=128, bn=256), dict(bm=128, bk=256, bn=64), dict(bm=256, bk=64, bn=128)]
    with pytest.raises(ValueError, match="distinct size"):
        tst.unequal_blocks(("block_q", "block_kv"), (128, 128))


def test_value_kinds_that_stress_a_formula():
    from pytest_tpucourse import strategies as tst

    rows = np.asarray(tst.random_array((4, 256), "float32", 0, kind="low_variance"), np.float64)
    assert np.all((np.var(rows, axis=1) > 5e-6) & (np.var(rows, axis=1) < 2e-5))  # near eps = 1e-5
    spiked = np.asarray(tst.random_array((4, 256), "float32", 0, kind="spike"))
    assert np.all(np.sort(spiked, axis=1)[:, -1] > 9e3) and np.all(np.sort(spiked, axis=1)[:, -2] < 10)
    cfg = tst.AttentionConfig(1, 4, 2, 128, 256, 64, True, "bfloat16")
    q, k, _ = (np.asarray(a, np.float64) for a in cfg.arrays(0, "negative_first_key"))
    scores = np.einsum("bhqd,bhkd->bhqk", q, np.repeat(k, cfg.group, axis=1)) / 8.0
    assert scores[..., 0].max() < -5e3 and np.abs(scores[..., 1:]).max() < 20



def test_an_input_drawn_again_is_the_same_and_never_the_kept_values_memory(monkeypatch):
    """random_array keeps each recipe's values (a warm process draws them once), read-only, within
    its bytes, and each array it gives owns its memory."""
    from pytest_tpucourse import strategies as tst

    kept = tst._DrawnValues()
    monkeypatch.setattr(tst, "_drawn", kept)
    monkeypatch.setattr(kept, "KEPT_BYTES", 3 * 4 * 256 * 128)
    first = tst.random_array((256, 128), "float32", 5, kind="masked")
    again = tst.random_array((256, 128), "float32", 5, kind="masked")
    np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
    assert first is not again and not np.shares_memory(np.asarray(first), np.asarray(again))
    values = next(iter(kept.kept.values()))
    assert not values.flags.writeable and not np.shares_memory(np.asarray(first), values)
    assert tst.random_array((256, 128), "bfloat16", 5, kind="masked").dtype == np.dtype("bfloat16")
    assert len(kept.kept) == 1  # one recipe, whatever the dtype it is rounded to
    for seed in range(6, 10):
        tst.random_array((256, 128), "float32", seed)
    assert kept.bytes <= kept.KEPT_BYTES and len(kept.kept) == 3
    assert not np.array_equal(np.asarray(tst.random_array((256, 128), "float32", 6)), np.asarray(first))
    assert float(tst.random_array((), "float32", 3)) == float(tst.random_array((), "float32", 3))  # a scalar

def test_a_compiler_fact_is_the_one_of_the_backend_the_run_compiles_for(monkeypatch):
    facts = {"cpu": "XLA:CPU's", "tpu": "XLA:TPU's"}
    assert checks.for_this_backend(facts) == "XLA:CPU's"
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")  # what a TPU VM's run says
    assert checks.for_this_backend(facts) == "XLA:TPU's"
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(pytest.skip.Exception, match=r"what XLA:GPU makes of this program was not measured \(the "
                                                    r"course measured XLA:CPU, XLA:TPU\)"):
        checks.for_this_backend(facts)


def test_an_ir_answer_has_exactly_the_readers_keys_and_a_wrong_key_is_named():
    """Chapter 12's answers against the course's reader, key by key: a key missing or one more fails,
    naming it; the reader's keys with equal values pass."""
    from pytest_tpucourse import ir

    want = {"kernels": [("fusion", "fusion")], "largest": ("fusion", "f32[8]")}
    ir.assert_summary_matches(FN, {"largest": ("fusion", "f32[8]"), "kernels": [["fusion", "fusion"]]}, want, dump="d")
    with pytest.raises(WrongResult, match=r"exactly the course reader's keys, 'kernels', 'largest'; it has the "
                                          r"key 'entry', not one of them"):
        ir.assert_summary_matches(FN, {**want, "entry": "main"}, want, dump="d")
    with pytest.raises(WrongResult, match=r"it misses the key 'largest' and has the key 'biggest', not one of them"):
        ir.assert_summary_matches(FN, {"kernels": want["kernels"], "biggest": want["largest"]}, want, dump="d")
    dot = {"name": "dot.1", "lhs_shape": (2, 3), "rhs_shape": (3, 4), "out_shape": (2, 4), "lhs_batch": (),
           "rhs_batch": (), "lhs_contracting": (1,), "rhs_contracting": (0,)}
    ir.assert_dots_match(FN, [{**dot, "einsum": "ab,bc->ac"}], [dot], dump="d")
    with pytest.raises(WrongResult, match=r"dot 0 \('dot.1'\) should have exactly the keys .*; it misses the key "
                                          r"'einsum' and has the key 'opcode', not one of them"):
        ir.assert_dots_match(FN, [{**dot, "opcode": "dot"}], [dot], dump="d")
    row = {"primitive": "tanh", "file": "f.py", "line": 3, "stablehlo": ["stablehlo.tanh"], "hlo": ["fusion"]}
    ir.assert_rows_are_rows(FN, [row], program="p")
    with pytest.raises(WrongResult, match=r"row 0 should have exactly the keys .*; it has the key 'ops', not one"):
        ir.assert_rows_are_rows(FN, [{**row, "ops": 1}], program="p")
