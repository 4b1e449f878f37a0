"""A gate judges the learner's own kernel (pytest_tpucourse/gates/own_work.py), before timing it."""

from pathlib import Path

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria, own_work
from pytest_tpucourse.gates import records as rec

from .gate_helpers import gate_run

HERE = Path(__file__).parent


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _dot_and_copy(x, y):
    """XLA's matmul with a token Pallas copy: the kernel is defined here, the work is XLA's."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)
    head = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct((8, 128), out.dtype), interpret=True)(out[:8, :128])
    return out.at[:8, :128].set(head)


def _operands(n=256):
    import jax.numpy as jnp

    return jnp.ones((n, n), jnp.bfloat16), jnp.ones((n, n), jnp.bfloat16)


def test_xla_doing_the_work_beside_a_token_kernel_is_found():
    work = own_work.of_call(_dot_and_copy, _operands(), flops=2 * 256 ** 3, what="matmul()")
    [problem] = own_work.problems(work, HERE)
    assert problem.startswith("matmul() computes 3.36e+07 FLOPs in dot_general/convolution outside its Pallas "
                              "kernels, 100% of the op's 3.36e+07")
    assert own_work.problems(work, HERE.parent / "solutions")[0].startswith(
        "matmul() runs Pallas kernels defined outside the graded tree")  # _copy is defined in tests/


def test_jaxs_shipped_kernel_is_not_the_learners():
    from pytest_tpucourse import public_kernels, strategies as tst

    q = tst.random_array((1, 1, 128, 128), "bfloat16", 0)
    work = own_work.of_call(public_kernels.flash_attention, (q, q, q), flops=1.0, what="flash_attention()")
    [problem] = own_work.problems(work, HERE)
    assert "runs Pallas kernels defined outside the graded tree" in problem
    assert "jax/experimental/pallas/ops/tpu/flash_attention.py" in problem


def test_a_program_without_a_kernel_is_found():
    import jax.numpy as jnp

    work = own_work.of_call(jnp.matmul, _operands(), flops=2 * 256 ** 3, what="matmul()")
    assert own_work.problems(work, HERE) == ["matmul() runs no Pallas kernel"]


def test_a_timed_kernel_not_the_learners_gets_a_fail_row_and_no_time(tmp_path):
    import jax

    slot = criteria.gate(1).criterion("matmul-near-xla").slots[0]
    run = gate_run(tmp_path, gate=1, seconds={"floor": 1e-4, "kernel": 5e-5}, tree_root=tmp_path)
    result = run.measure_trio("matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(2 * 256 ** 3, 1e6),
                              floor=jax.jit(lambda x, y: x @ y), kernel=jax.jit(_dot_and_copy), ceiling=None,
                              inputs=lambda seed: _operands())
    assert result.status == "fail" and not result.timed
    assert "outside the graded tree" in result.message and "outside its Pallas kernels" in result.message
    assert run.harness.asked == []  # nothing timed
    [row] = [r for r in rec.read(tmp_path / "r.jsonl").records if r.method == "measured"]
    assert (row.implementation, row.statistic, row.verdict, row.value) == ("kernel", "own-work", "fail", 0.0)


def test_a_gate_that_judges_own_work_needs_the_programs_to_check(tmp_path):
    run = gate_run(tmp_path, gate=3, platform="cpu", device_kind="cpu", tree_root=tmp_path)
    slot = criteria.gate(3).criterion("correct").slots[0]
    with pytest.raises(ValueError, match="gate 03 judges the learner's own kernel: pass work="):
        run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None)
