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


# ------------------------------------------------------------ confirmed by the trusted check


def _own_copy_kernel(tree_root: Path):
    """A Pallas copy defined in a module of `tree_root`: the graded tree's own kernel."""
    import importlib.util

    module = tree_root / "own_copy.py"
    module.write_text("import jax\nfrom jax.experimental import pallas as pl\n\n"
                      "def _copy(x_ref, o_ref):\n    o_ref[...] = x_ref[...]\n\n"
                      "def copy(x):\n    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),"
                      " interpret=True)(x)\n")
    spec = importlib.util.spec_from_file_location("own_copy_for_confirmation", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded.copy


@pytest.mark.parametrize("platform, counts", [("tpu", True), ("cpu", False)])
def test_an_unconfirmed_kernel_is_not_the_learners_on_the_chip(tmp_path, platform, counts):
    """On the chip a gate times the learner's kernel only once `tpucourse confirm` agreed on its
    bytes; off the chip nothing is measured, so nothing waits on it."""
    import jax.numpy as jnp

    copy = _own_copy_kernel(tmp_path)
    why = "exercises/ch13/forward.py: the trusted check has not confirmed it; run `tpucourse confirm ch13` first"
    where = {} if platform == "tpu" else {"device_kind": "cpu"}
    run = gate_run(tmp_path, gate=3, platform=platform, kernels_native=platform == "tpu", tree_root=tmp_path,
                   unconfirmed=(why,), **where)
    slot = criteria.gate(3).criterion("correct").slots[0]
    x = jnp.ones((8, 128), jnp.float32)
    result = run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None,
                        work=[own_work.of_call(copy, (x,), flops=0.0, what="flash_forward()")])
    assert (result.status == "fail") is counts
    assert (why in result.message) is counts
    confirmed = gate_run(tmp_path, gate=3, kernels_native=True, tree_root=tmp_path).verify(
        "correct", slot.op, slot.shapes, slot.dtype, check=lambda: None,
        work=[own_work.of_call(copy, (x,), flops=0.0, what="flash_forward()")])
    assert confirmed.status == "pass"


def test_the_confirmation_names_the_bytes_it_judged(tmp_path):
    from pytest_tpucourse.learner import state

    assert state.why_not_confirmed(state.read(tmp_path), "ch11.matmul", "ab" * 32) == \
        "the trusted check has not confirmed it"
    state.record_confirmations(tmp_path, {"ch11.matmul": {"verdict": "agrees", "cases": 3},
                                          "ch11.fused_matmul": {"verdict": "disagrees", "reason": "off at 256x384"}},
                               {"ch11.matmul": "ab" * 32, "ch11.fused_matmul": "cd" * 32}, "tpucourse confirm")
    data = state.read(tmp_path)
    assert state.why_not_confirmed(data, "ch11.matmul", "ab" * 32) is None
    assert "other bytes" in state.why_not_confirmed(data, "ch11.matmul", "ef" * 32)
    assert state.why_not_confirmed(data, "ch11.fused_matmul", "cd" * 32) == \
        "the trusted check disagrees: off at 256x384"
    data["confirmed"]["ch11.fused_matmul"]["verdict"] = "agrees"  # written by hand: the seal no longer holds
    assert state.why_not_confirmed(data, "ch11.fused_matmul", "cd" * 32) == "the trusted check has not confirmed it"


def test_a_gate_run_on_the_chip_names_the_learners_unconfirmed_kernels(tmp_path):
    """run/gate_tests.py reads the state for the bytes the run imported, for the learner's tree only."""
    from types import SimpleNamespace

    from pytest_tpucourse.core.course import load_course
    from pytest_tpucourse.learner import state
    from pytest_tpucourse.run.gate_tests import _unconfirmed_kernels

    course = load_course(HERE.parent)
    chapter = tmp_path / "exercises" / "ch11"
    chapter.mkdir(parents=True)
    for name in ("matmul", "fused_matmul"):
        (chapter / f"{name}.py").write_text(f"# {name}\n")
    imported = {str((chapter / "matmul.py").resolve()): "11" * 32}  # the bytes the run imported
    units = {}  # the tree's files the run's graded modules ran (grading/unit_files.py)

    def session(learners=True, accelerator=True):
        return SimpleNamespace(
            tree=SimpleNamespace(is_learners=learners, chapter_dir=lambda chapter_id: tmp_path / "exercises" / chapter_id),
            gates=SimpleNamespace(on_accelerator=accelerator, rehearsal=None),
            course=SimpleNamespace(root=tmp_path, exercise=course.exercise),
            grading=SimpleNamespace(imported=imported, unit_of=lambda paths: units))

    assert _unconfirmed_kernels(session(), 1) == tuple(
        f"exercises/ch11/{name}.py: the trusted check has not confirmed it; run `tpucourse confirm ch11` first"
        for name in ("matmul", "fused_matmul"))
    state.record_confirmations(tmp_path, {"ch11.matmul": {"verdict": "agrees"}, "ch11.fused_matmul": {"verdict": "agrees"}},
                               {"ch11.matmul": "11" * 32,
                                "ch11.fused_matmul": state.file_digest(chapter / "fused_matmul.py")}, "tpucourse confirm")
    assert _unconfirmed_kernels(session(), 1) == ()
    imported[str((chapter / "matmul.py").resolve())] = "22" * 32  # edited after it was confirmed
    [why] = _unconfirmed_kernels(session(), 1)
    assert why.startswith("exercises/ch11/matmul.py: the trusted check confirmed other bytes")
    assert _unconfirmed_kernels(session(learners=False), 1) == ()  # --solutions, --impl-root: no state of theirs
    assert _unconfirmed_kernels(session(accelerator=False), 1) == ()  # nothing measured off the chip
    assert _unconfirmed_kernels(session(), 0) == ()  # gate 00 times XLA, not the learner


def test_a_gate_on_the_chip_names_a_kernel_whose_helper_changed_since_its_confirmation(tmp_path):
    """The confirmation holds every file the kernel runs: a helper swapped after it (or one this run
    ran that the check never saw) leaves the kernel unconfirmed, as an edit of its module does."""
    from types import SimpleNamespace

    from pytest_tpucourse.core.course import load_course
    from pytest_tpucourse.learner import state
    from pytest_tpucourse.run.gate_tests import _unconfirmed_kernels

    course = load_course(HERE.parent)
    chapter = tmp_path / "exercises" / "ch13"
    chapter.mkdir(parents=True)
    (chapter / "forward.py").write_text("from ._tiles import step\n")
    (chapter / "_tiles.py").write_text("def step(): return 1\n")
    module = str((chapter / "forward.py").resolve())
    imported = {module: state.file_digest(chapter / "forward.py")}
    units = {str(chapter / "_tiles.py"): state.file_digest(chapter / "_tiles.py")}
    session = SimpleNamespace(
        tree=SimpleNamespace(is_learners=True, chapter_dir=lambda chapter_id: tmp_path / "exercises" / chapter_id),
        gates=SimpleNamespace(on_accelerator=True, rehearsal=None),
        course=SimpleNamespace(root=tmp_path, exercise=course.exercise),
        grading=SimpleNamespace(imported=imported, unit_of=lambda paths: dict(units)))
    helpers = {"exercises/ch13/_tiles.py": state.file_digest(chapter / "_tiles.py")}
    state.record_confirmations(tmp_path, {"ch13.forward": {"verdict": "agrees"}}, {"ch13.forward": imported[module]},
                               "tpucourse confirm", {"ch13.forward": helpers})
    def forward():
        return [why for why in _unconfirmed_kernels(session, 3) if why.startswith("exercises/ch13/forward.py")]

    assert forward() == []
    (chapter / "_tiles.py").write_text("def step(): return 0\n")  # swapped after the confirmation
    [why] = forward()
    assert why.startswith("exercises/ch13/forward.py: the trusted check confirmed other bytes of the files it runs "
                          "(exercises/ch13/_tiles.py changed or added since)")
    state.record_confirmations(tmp_path, {"ch13.forward": {"verdict": "agrees"}}, {"ch13.forward": imported[module]},
                               "tpucourse confirm", {"ch13.forward": {}})  # a check that never saw the helper
    units[str(chapter / "_tiles.py")] = state.file_digest(chapter / "_tiles.py")
    [why] = forward()
    assert "exercises/ch13/_tiles.py changed or added since" in why
