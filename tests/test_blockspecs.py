"""Block legality on a CPU, the blockspec sandbox, the pipeline schedule, and the TPU
interpret settings chapter 6 grades DMA pipelines under."""

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.readers import block_skipping, blockspecs
from pytest_tpucourse.checking.block_rules import assert_rule_matches_lowering
from pytest_tpucourse.compiler.block_verdict import compiler_verdict
from pytest_tpucourse import checks, chips, public_kernels
from pytest_tpucourse.commands import main
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse.core.outcomes import LearnerCodeError, WrongResult

from .support import REPO, compiler_retiles_int8

needs_libtpu = pytest.mark.skipif(not libtpu.available(), reason=libtpu.INSTALL_LINE)


def graded(function):
    return checks.graded(function, "kernel() in test")


@pytest.mark.parametrize("shape, block, dtype, legal", [
    ((1024, 1024), (8, 128), "bfloat16", True),  # the rule is (8, 128) for every dtype
    ((1024, 1024), (8, 64), "float32", False),
    ((16, 128), (None, 128), "float32", False),  # None counts as 1 row
    ((4096,), (128,), "bfloat16", False),  # rank 1: a power of two >= 128 x 2 for 16-bit types
])
def test_the_lowering_is_asked_about_one_block(shape, block, dtype, legal):
    assert (blockspecs.lowering_error(shape, block, dtype) is None) == legal


def test_a_rule_that_disagrees_with_the_lowering_is_named_with_the_lowerings_reason():
    always_legal = graded(lambda shape, block, dtype: None)
    with pytest.raises(WrongResult) as caught:
        assert_rule_matches_lowering(always_legal, [((16, 128), (None, 128), "float32")])
    assert ("returned None (legal), but the TPU lowering rejects it: dimension -2 of the block is 1 "
            "(None counts as 1): neither a multiple of 8 (sublanes) nor the array's full 16") in str(caught.value)
    with pytest.raises(WrongResult, match="expected None .legal. or a non-empty str"):
        assert_rule_matches_lowering(graded(lambda *a: ""), [((1024, 1024), (8, 64), "float32")])


def test_the_sandbox_prints_verdict_grid_padding_and_vmem(capsys):
    assert main.main(["blockspec", "--shape", "1000x384", "--block", "128x128", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    for line in ("verdict legal: the TPU lowering accepts it",
                 "grid    (8, 3): cdiv(1000, 128) x cdiv(384, 128) = 24 steps",
                 "ragged  axis 0: the last block holds 104 of 128; 24 padding",
                 "VMEM    32,768 bytes per buffer (128 x 128 x 2 bytes); a pipelined operand has 2 buffers: 65,536 bytes"):
        assert line in out
    assert main.main(["blockspec", "--shape", "1024x1024", "--block", "8x64"]) == 0
    assert "verdict illegal: dimension -1 of the block is 64: neither a multiple of 128" in capsys.readouterr().out


def test_the_sandboxs_headline_and_int8_note_agree_with_the_compilers_verdict():
    """A block the lowering accepts and the compiler refuses (an 8192 x 8192 f32 block over VMEM) is
    headed by the refusal, not "legal"; the int8 note says what the installed compiler did, and that
    libtpu releases differ, never a fixed verdict."""
    from dataclasses import replace

    from pytest_tpucourse.instruments.blockspec_sandbox import sandbox

    lowered = sandbox((1024, 1024), (8, 128), "int8", compiler=False)
    assert lowered.headline == "legal: the TPU lowering accepts it" and lowered.compiled is None
    note = lowered.lines()[-1]
    assert "(no verdict of it here)" in note and "refused by 0.0.42 (E2002) and compiled by 0.0.50" in note
    refused = replace(lowered, compiled=False, compiler="compiler v5e: E2002: the block (8, 128) is neither a "
                      "multiple of int8's tiling (32, 128) nor the array's full extent")
    assert refused.headline.startswith("refused by the compiler v5e: E2002: the block (8, 128)")
    assert refused.lines()[1].startswith("verdict refused by the compiler v5e") and "installed one refuses it" in refused.lines()[-1]
    compiled = replace(lowered, compiled=True, compiler="compiler v5e: compiles (libtpu 0.0.50.1, ahead of time)")
    assert compiled.headline == "legal: the TPU lowering accepts it and the compiler compiles it"
    assert "installed one compiles it" in compiled.lines()[-1]
    vmem = replace(sandbox((8192, 8192), (8192, 8192), "float32", compiler=False), compiled=False,
                   compiler="compiler v5e: E1001: the copy kernel needs 512.00 MiB of VMEM (input and output "
                            "block, one buffer each), over its scoped limit of 16.00 MiB")
    assert vmem.headline.startswith("refused by the compiler v5e: E1001") and "the TPU lowering accepts it" in vmem.headline


@needs_libtpu
def test_the_sandbox_prints_the_compilers_verdict_after_the_lowerings(capsys):
    def sandbox(shape, block, dtype):
        assert main.main(["blockspec", "--shape", shape, "--block", block, "--dtype", dtype]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[1].startswith("verdict "), lines
        return lines[2]

    if compiler_retiles_int8():  # libtpu 0.0.50 re-tiles it (chapter 7's catalogue, a column per libtpu)
        assert sandbox("1024x1024", "8x128", "int8").startswith("compiler v5e: compiles")
    else:
        assert sandbox("1024x1024", "8x128", "int8") == (
            "compiler v5e: E2002: the block (8, 128) is neither a multiple of int8's tiling "
            "(32, 128) nor the array's full extent")
    assert sandbox("1024x1024", "8x128", "bfloat16").startswith(f"compiler v5e: compiles (libtpu {libtpu.libtpu_version()}")
    assert sandbox("2048x4096", "2048x2048", "float32") == (  # 16 MiB in, 16 MiB out, one buffer each
        "compiler v5e: E1001: the copy kernel needs 32.00 MiB of VMEM (input and output block, "
        "one buffer each), over its scoped limit of 16.00 MiB")
    assert sandbox("2048x4096", "2048x1024", "float32").startswith("compiler v5e: compiles")  # 16 MiB: at the limit
    assert sandbox("1024x1024", "8x64", "float32") == (
        "compiler v5e: not asked: the lowering rejects the block first")


def test_without_the_compiler_the_sandbox_says_it_did_not_ask(capsys, monkeypatch):
    monkeypatch.setattr(libtpu, "_available", False)
    assert main.main(["blockspec", "--shape", "1024x1024", "--block", "8x128", "--dtype", "int8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == 'compiler: not checked (pip install -e ".[tpu-compile]")'


@needs_libtpu
def test_the_compiler_facts_chapter_6_states():
    """README, "The legality rule" and "The schedule the pipeline runs" (v5e; libtpu 0.0.42.1 refuses
    the int8 (8, 128) block, 0.0.50.1 compiles it, as the README says)."""
    int8 = compiler_verdict((1024, 1024), (8, 128), "int8")
    if compiler_retiles_int8():
        assert int8 is None
    else:
        assert (int8.kind, int8.code, int8.tiling, int8.block_shape[-2:]) == ("tiling", "E2002", (32, 128), (8, 128))
    assert compiler_verdict((1024, 1024), (8, 128), "bfloat16") is None
    assert compiler_verdict((1024, 1024), (32, 128), "int8") is None
    x = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)
    with pytest.raises(libtpu.TpuCompileError) as caught:  # chapter 11's matmul as first written, 1024 blocks
        libtpu.compile_for(public_kernels.tiled_matmul, x, x, chip=chips.get_chip("v5e"), bm=1024, bk=1024, bn=1024)
    assert (caught.value.code, caught.value.vmem_needed_bytes, caught.value.vmem_limit_bytes) == (
        "E1001", 28 * 2 ** 20, 16 * 2 ** 20)  # 3 blocks x 2 buffers x 4 MiB + a 4 MiB f32 accumulator


@needs_libtpu
def test_a_rule_refusing_a_dtypes_half_tile_is_told_what_the_compiler_says():
    sixteen_rows = graded(lambda shape, block, dtype: None if block[-2] % (32 // jnp.dtype(dtype).itemsize) == 0
                          else "rows are not a whole native tile")
    with pytest.raises(WrongResult) as caught:
        assert_rule_matches_lowering(sixteen_rows, [((1024, 1024), (8, 128), "bfloat16")], compiler="v5e")
    assert f"the TPU lowering accepts it. The v5e compiler (libtpu {libtpu.libtpu_version()}" in str(caught.value)
    assert "compiles it too: (16, 128) is how bfloat16 values fill a vreg" in str(caught.value)
    with pytest.raises(WrongResult) as caught:
        assert_rule_matches_lowering(sixteen_rows, [((1024, 1024), (8, 128), "int8")], compiler="v5e")
    if compiler_retiles_int8():
        assert "compiles it too" in str(caught.value)
    else:
        assert ("The v5e compiler refuses it, E2002: the block (8, 128) is neither a multiple of int8's tiling "
                "(32, 128) nor the array's full extent. That is the compiler's tiling, checked after the "
                "lowering") in str(caught.value)


@pytest.mark.parametrize("argv, message", [
    (["blockspec", "--shape", "1000x384", "--block", "128x12x8"], "differ in rank"),
    (["blockspec", "--shape", "1000x384", "--block", "128xabc"], "a block is sizes or None joined by 'x'"),
    (["blockspec", "--shape", "Nonex384", "--block", "8x128"], "an array shape takes sizes only"),
])
def test_the_sandbox_names_a_bad_argument(capsys, argv, message):
    assert main.main(argv) == 2
    assert message in capsys.readouterr().err


def _ch11_matmul():
    from pytest_tpucourse.grading.tree import GradedTree, Implementation
    from pytest_tpucourse.core.course import load_course

    tree = GradedTree("solutions", REPO / "solutions")
    return Implementation(tree, load_course(REPO), "ch11").matmul.matmul


def test_chapter_11_matmul_moves_the_closed_form_of_hbm_bytes():
    """x read once per column block, y once per row block, the output written once."""
    m, k, n, bm, bk, bn = 256, 512, 384, 128, 128, 128
    x = jnp.zeros((m, k), jnp.bfloat16)
    y = jnp.zeros((k, n), jnp.bfloat16)
    schedule = block_skipping.pipeline_schedule(_ch11_matmul().jaxpr(x, y, bm=bm, bk=bk, bn=bn))
    assert sum(s.nbytes for s in schedule) == 2 * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    output = [s for s in schedule if s.kind == "output"][0]
    assert len(output.transfers) == (m // bm) * (n // bn) and output.revisited == ()


def test_the_interpreter_records_the_grid_in_the_tpus_order():
    def add_one(x):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + 1),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 3),
                              in_specs=[spec], out_specs=spec)(x)

    points = tpu_rules.recorded_grid_points(graded(add_one), jnp.zeros((16, 384)))
    assert points == [((i, j), 0) for i in range(2) for j in range(3)]


def _table_gather(table, idx):
    v, d = table.shape

    def copy(idx_ref, row_ref, o_ref):
        o_ref[...] = row_ref[...]

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(idx.shape[0],),
        in_specs=[pl.BlockSpec((None, 1, d), lambda i, idx_ref: (idx_ref[i], 0, 0))],
        out_specs=pl.BlockSpec((None, 1, d), lambda i, idx_ref: (i, 0, 0)))
    out = jax.ShapeDtypeStruct((idx.shape[0], 1, d), table.dtype)
    return pl.pallas_call(copy, out_shape=out, grid_spec=spec)(idx, table.reshape(v, 1, d))[:, 0]


def test_an_index_past_the_end_raises_in_tpu_interpret_mode_and_is_clamped_by_the_generic_one():
    table = jnp.arange(10 * 128, dtype=jnp.float32).reshape(10, 128)
    past_the_end = jnp.asarray([3, 10], jnp.int32)
    tpu_rules.assert_out_of_bounds_raises(graded(_table_gather), table, past_the_end)
    with pltpu.force_tpu_interpret_mode(True):
        assert (jax.block_until_ready(_table_gather(table, past_the_end))[:, 0] == jnp.asarray([384.0, 1152.0])).all()
    clamped = graded(lambda t, i: _table_gather(t, jnp.minimum(i, 9)))
    with pytest.raises(WrongResult, match="the index was clamped or wrapped"):
        tpu_rules.assert_out_of_bounds_raises(clamped, table, past_the_end)


def _column_sums(x, *, prefetch_first: bool, wait: bool = True):
    """Two slots, two semaphores; prefetch_first=False waits before starting the next copy."""
    rows, n = 8, x.shape[1]
    blocks = x.shape[0] // rows

    def kernel(x_hbm, o_ref, slots, sems):
        def copy(b, slot):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(b * rows, rows)], slots.at[slot], sems.at[slot])

        copy(0, 0).start()
        o_ref[...] = jnp.zeros_like(o_ref)

        def step(b, carry):
            slot = b % 2

            def prefetch():
                @pl.when(b + 1 < blocks)
                def _():
                    copy(b + 1, 1 - slot).start()

            if prefetch_first:
                prefetch()
            if wait:
                copy(b, slot).wait()
            o_ref[...] += jnp.sum(slots[slot], axis=0, keepdims=True)
            if not prefetch_first:
                prefetch()
            return carry

        jax.lax.fori_loop(0, blocks, step, 0)

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, n), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.VMEM((2, rows, n), x.dtype),
                                          pltpu.SemaphoreType.DMA((2,))])(x)


def test_the_order_of_starts_and_waits_tells_a_pipeline_from_a_serial_loop():
    x = jnp.ones((32, 128), jnp.float32)
    tpu_rules.assert_prefetches(graded(functools.partial(_column_sums, prefetch_first=True)), x)
    with pytest.raises(WrongResult, match="waits for each copy before it starts the next one"):
        tpu_rules.assert_prefetches(graded(functools.partial(_column_sums, prefetch_first=False)), x)


def test_a_copy_never_waited_for_is_caught_by_the_eager_setting_alone():
    x = jnp.ones((32, 128), jnp.float32)
    never_waited = graded(functools.partial(_column_sums, prefetch_first=True, wait=False))
    with tpu_rules.interpret_setting("eager"):  # values alone: right, the bug hidden
        assert (never_waited(x) == 32.0).all()
    with pytest.raises(WrongResult, match="A copy started and never waited for leaves its DMA semaphores counting"):
        with tpu_rules.interpret_setting("eager", never_waited):
            never_waited(x)
    pipeline = graded(functools.partial(_column_sums, prefetch_first=True))
    with tpu_rules.interpret_setting("eager", pipeline):
        assert (pipeline(x) == 32.0).all()  # a correct pipeline leaves nothing counting


def test_a_learner_error_inside_an_interpret_setting_is_still_the_learners():
    def broken(x):
        raise ValueError("no kernel here")

    with pytest.raises(LearnerCodeError, match="no kernel here"):
        with tpu_rules.interpret_setting("on_wait", graded(broken)):
            graded(broken)(jnp.ones(3))


def test_the_sandbox_pads_a_block_as_vmem_holds_it(capsys):
    """Chapter 8's compiler-checked model: 8 bf16 rows stay 8 (no line), 3 f32 rows pad to 4."""
    assert main.main(["blockspec", "--shape", "1024x1024", "--block", "8x128", "--dtype", "bfloat16"]) == 0
    assert "padded as VMEM holds it" not in capsys.readouterr().out
    assert main.main(["blockspec", "--shape", "16x128", "--block", "3x64", "--dtype", "float32"]) == 0
    assert "padded as VMEM holds it: 2,048 bytes per buffer" in capsys.readouterr().out


def _summed_over_axis_1(semantics):
    def kernel(x_ref, o_ref):
        o_ref[...] += x_ref[...]

    def call(x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype), grid=(1, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, l: (i, l))],
            out_specs=pl.BlockSpec((8, 128), lambda i, l: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)
    return jax.make_jaxpr(call)(jnp.zeros((8, 512), jnp.float32))


def test_a_parallel_axis_an_output_ignores_is_named_with_the_dimension_semantics():
    from pytest_tpucourse.grading.messages import parallel_axes_outputs_ignore

    (line,) = parallel_axes_outputs_ignore(_summed_over_axis_1(("parallel", "parallel")))
    assert line.startswith("Grid axis 1 is marked \"parallel\" (dimension_semantics=('parallel', 'parallel'))")
    assert "mark it \"arbitrary\"" in line
    assert parallel_axes_outputs_ignore(_summed_over_axis_1(("parallel", "arbitrary"))) == []
