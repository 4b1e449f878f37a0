"""Each way a gate pass could be had without earning it, tried: no gate passes, and the reason is printed.

The conftest hook (test_gates.py::test_a_conftest_cannot_name_the_device), a device rewritten
mid-run (test_timer.py::test_a_device_that_changed_since_the_start_writes_no_measured_row), a
cached answer (test_timer.py::test_timed_outputs_are_checked_before_and_after_timing), torn
lines (test_records.py) and a criterion with unmeasured slots (test_gates.py,
test_gates_on_a_tpu_standin_write_measured_rows) are tried where their machinery is tested.
"""


from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import criteria, judge, report, stats
from pytest_tpucourse.gates import records as rec

from .gate_helpers import (ADD_FLOOR, ADD_GATE_TEST, MEASURED, NONE_PASSED, gate_run, make_record, read_judged,
                           samples, standin_conftest)

# Graded code runs in the test process: at import it loosens gate 00's band every way it can reach.
TAMPER = """
    import dataclasses
    from pytest_tpucourse.gates import criteria

    loose = dataclasses.replace(criteria.GATES[0].criteria[0], ratio_range=(0.0, 1e9))
    object.__setattr__(criteria.GATES[0].criteria[0], "ratio_range", (0.0, 1e9))
    criteria.GATES = (dataclasses.replace(criteria.GATES[0], criteria=(loose,)),) + criteria.GATES[1:]
    criteria.GATE0_BAND = (0.0, 1e9)
"""


def test_graded_code_that_rewrites_the_thresholds_changes_no_verdict(fake_course):
    fake_course.test_file(TAMPER + ADD_GATE_TEST, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": 10 * ADD_FLOOR}))
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--records", str(records))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*is 10.00x its roofline floor*the band is ?0.95, 1.5?",
                                 "  fail  *The roofline predicts this chip*", f"{NONE_PASSED}*"])
    rows, rejected = read_judged(records)
    assert not rejected and [r.verdict for r in rows if r.method == "measured"] == ["fail"]


def test_interpret_mode_on_an_accelerator_times_nothing(fake_course):
    fake_course.test_file(ADD_GATE_TEST, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": 1.2 * ADD_FLOOR}))
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--interpret", "tpu", "--records", str(records), "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*WARNING --interpret tpu on TPU v5 lite: gate speed criteria are not timed in this run",
        "*interpret mode: nothing is timed*",
    ])
    assert {r.method for r in rec.read(records).records} == {"roofline-predicted"}


def test_hand_written_rows_are_rejected_on_read_with_path_and_line(tmp_path):
    path = tmp_path / "records.jsonl"
    g0 = criteria.gate(0).criterion("roofline-predicts")
    cost = {"flops": 4096.0 ** 2, "bytes": 3 * 2 * 4096.0 ** 2}
    # a CPU's device kind on a measured row, a pass at 9.99x the floor, no samples
    rec.append(path, make_record(**{**MEASURED, "device_kind": "cpu"}, value=9.99 * ADD_FLOOR,
                                 ratio_to_floor=9.99, spread=0.0))
    times = samples(9.99 * ADD_FLOOR)
    judged = judge.judge_ratios([t / ADD_FLOOR for t in times], g0.ratio_range)
    for slot in g0.slots:  # every slot "measured" with self-consistent samples and ratios: only the verdict forged
        rec.append(path, make_record(**MEASURED, op=slot.op, shapes=slot.shapes, cost=cost, samples=times,
                                     value=stats.median(times), spread=stats.iqr(times),
                                     ratio_to_floor=judged.median, ratio_ci=judged.interval))
    loaded = report.load([path], chips.ChipRegistry())
    assert not loaded.accepted and report.gates_passed(loaded.accepted) == 0
    problems = loaded.problems()
    assert problems[0].startswith(f"{path}:1: rejected measured floor row of gate 00 roofline-predicts (add): "
                                  f"device kind 'cpu' on tpu is not a v5e")
    assert all(f"{path}:{n}: rejected" in line for n, line in enumerate(problems, 1))
    assert "verdict pass, but its ratio's interval [9.95, 10] judged against [0.95, 1.5]" in problems[1] and "is a fail" in problems[1]


def test_a_kernel_doing_no_work_at_the_timed_size_gets_a_fail_row_and_no_time(tmp_path):
    import jax.numpy as jnp

    slot = criteria.gate(1).criterion("fused-beats-unfused").slots[0]
    run = gate_run(tmp_path, gate=1, seconds={"floor": 1e-4, "kernel": 1e-7})
    result = run.measure_trio("fused-beats-unfused", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                              floor=lambda x: x * 2, kernel=jnp.zeros_like, ceiling=None,
                              inputs=lambda seed: (jnp.full((8, 128), seed + 1.0, jnp.float32),))
    assert result.status == "fail" and "is wrong at the timed size" in result.message
    assert run.harness.asked == []
    rows, _ = read_judged(tmp_path / "r.jsonl")
    assert [(r.statistic, r.verdict, r.value) for r in rows if r.method == "measured"] == [
        ("timed-output-check", "fail", 0.0)]
    assert report.gate_statuses(rows, "v5e")[1]["fused-beats-unfused"] == "fail"
