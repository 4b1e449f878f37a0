"""Gate 04's timing: a distributed kernel against its compute alone, and runs with too few chips.

No accelerator is available to these tests: the harness is fake (tests/gate_helpers.py),
so they prove which rows are written and how they are judged, never a number.
"""

import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import criteria, placement, report
from pytest_tpucourse.gates import records as rec

from .gate_helpers import gate_run, read_judged

COST = roofline.matmul_cost(1024, 512, 16384, "bfloat16")
SHAPES = [(1024, 512), (512, 4 * 16384)]
FLOOR = COST.flops / 1.97e14  # v5e's roofline floor of one chip's compute: 87.2 us, compute-bound


def _measure(run, devices=4, kernel=lambda x: x + 1):
    return run.measure_against_compute_alone(
        "communication-hidden", "all-gather-matmul", SHAPES, "bfloat16", COST,
        kernel=kernel, compute_alone=lambda x: x * 2, kernel_inputs=lambda seed: (float(seed),),
        compute_alone_inputs=lambda seed: (float(seed) + 1,), kernel_reference=lambda x: x + 1,
        compute_alone_reference=lambda x: x * 2, devices=devices)


def test_the_kernel_is_judged_by_its_time_over_its_compute_alone(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 1e-4, "kernel": 1.05e-4})
    result = _measure(run)
    assert result.status == "pass" and "1.05x its compute alone" in result.message
    assert run.harness.asked == [("kernel", "compute-alone")]  # timed together, interleaved
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    mine = {r.implementation: r for r in rows if r.method == "measured"}
    alone = mine["compute-alone"]
    assert alone.verdict == "reference" and alone.ratio_to_floor == pytest.approx(1e-4 / FLOOR)  # 1.15x its floor
    assert "within [0.0, 1.5]" in alone.notes
    assert mine["kernel"].verdict == "pass" and mine["kernel"].ratio_to_compute_alone == pytest.approx(1.05)
    assert mine["kernel"].run_id == mine["compute-alone"].run_id
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "pass"
    assert sorted(run.store.stored, key=str) == sorted([None, "compute-alone"], key=str)


def test_a_compute_alone_far_from_its_floor_fails_the_kernel_whatever_its_ratio(tmp_path):
    """At 3x its floor the compute alone hides a whole exposed gather in the ratio: not judged a pass."""
    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 3 * FLOOR, "kernel": 3.2 * FLOOR})
    result = _measure(run)
    assert result.status == "fail" and "1.07x its compute alone" in result.message
    assert "compute alone 3.00x its roofline floor" in result.message and "NOT within [0.0, 1.5]" in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "fail"


def test_a_forged_pass_over_a_slow_compute_alone_is_rejected(tmp_path):
    import dataclasses
    import json

    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 3 * FLOOR, "kernel": 3.2 * FLOOR})
    _measure(run)
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    forged = [json.loads(line) for line in lines]
    for row in forged:
        if row["implementation"] == "kernel" and row["method"] == "measured":
            row["verdict"] = "pass"
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(row) + "\n" for row in forged))
    rows, rejected = read_judged(tmp_path / "f.jsonl")
    assert [r.why for r in rejected] == ["verdict pass, but its compute alone is 3x its roofline floor, not within "
                                         "[0.0, 1.5]"]
    assert dataclasses.is_dataclass(rejected[0])


def _hides_nothing():
    from pytest_tpucourse.core.outcomes import WrongResult

    raise WrongResult("never computes while a copy is in flight")


def test_a_schedule_that_hides_nothing_fails_before_timing(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 1e-4, "kernel": 1.05e-4})
    result = run.measure_against_compute_alone(
        "communication-hidden", "all-gather-matmul", SHAPES, "bfloat16", COST, kernel=lambda x: x + 1,
        compute_alone=lambda x: x * 2, kernel_inputs=lambda seed: (float(seed),),
        compute_alone_inputs=lambda seed: (float(seed) + 1,), kernel_reference=lambda x: x + 1,
        compute_alone_reference=lambda x: x * 2, devices=4, schedule_check=_hides_nothing)
    assert result.status == "fail" and "before timing: never computes while a copy is in flight" in result.message
    assert run.harness.asked == []
    [row] = [r for r in rec.read(tmp_path / "r.jsonl").records if r.method == "measured"]
    assert (row.statistic, row.verdict) == (rec.SCHEDULE_CHECK, "fail")
    assert not read_judged(tmp_path / "r.jsonl")[1]


def test_communication_not_hidden_fails_and_the_row_stays(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 1e-4, "kernel": 1.6e-4})
    result = _measure(run)
    assert result.status == "fail" and "is 1.60x its compute alone" in result.message
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    assert [r.implementation for r in rows if r.verdict == "fail"] == ["kernel"]
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "fail"


def test_a_kernel_wrong_at_the_timed_size_gets_a_fail_row_and_no_time(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=4, seconds={"compute-alone": 1e-4, "kernel": 1e-6})
    result = _measure(run, kernel=lambda x: x * 0)
    assert result.status == "fail" and "before timing" in result.message
    assert run.harness.asked == []
    [row] = [r for r in rec.read(tmp_path / "r.jsonl").records if r.method == "measured"]
    assert (row.implementation, row.statistic, row.verdict, row.unit) == ("kernel", "timed-output-check", "fail",
                                                                          "check")


def test_one_chip_times_the_compute_alone_and_records_that_the_kernel_needs_four_chips(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=1, seconds={"compute-alone": 1e-4})
    result = _measure(run, kernel=None)
    assert result.status == "not runnable here"
    assert result.message.startswith("not runnable on one chip (needs 4 chips): compute alone measured, 100.0 us "
                                     "on one v5e chip")
    assert run.harness.asked == [("compute-alone",)]  # the compute alone alone, on the one chip
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    measured = {r.implementation: r for r in rows if r.method == "measured"}
    assert (measured["compute-alone"].verdict, measured["compute-alone"].value) == ("reference", pytest.approx(1e-4))
    kernel = measured["kernel"]
    assert (kernel.verdict, kernel.value, kernel.statistic) == ("not-runnable", None, "too-few-chips")
    assert "needs 4 chips; this run has 1 TPU v5 lite" in kernel.notes and kernel.run_id == measured["compute-alone"].run_id
    statuses = report.gate_statuses(rows, "v5e")[4]
    assert statuses["communication-hidden"] == "not runnable here"
    assert report.too_few_chips(rows, 4, "v5e", statuses) == (
        "not runnable on one chip (needs 4 chips): compute alone measured, communication not checked yet")
    assert report.gates_passed(rows) == 0


def test_one_chip_without_a_compute_alone_records_only_that_it_needs_four(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=1, seconds={})
    result = run.measure_against_compute_alone(
        "communication-hidden", "all-gather-matmul", SHAPES, "bfloat16", COST, kernel=None, compute_alone=None,
        kernel_inputs=None, compute_alone_inputs=None, kernel_reference=None, compute_alone_reference=None,
        devices=4)
    assert result.status == "not runnable here" and "needs 4 chips; this run has 1 TPU v5 lite" in result.message
    assert run.harness.asked == []  # nothing is timed
    rows = rec.read(tmp_path / "r.jsonl").records
    kernel = [r for r in rows if r.method == "measured"]
    assert [(r.implementation, r.verdict, r.value) for r in kernel] == [("kernel", "not-runnable", None)]
    statuses = report.gate_statuses(rows, "v5e")[4]
    assert report.too_few_chips(rows, 4, "v5e", statuses) == (
        "not runnable on one chip (needs 4 chips): compute alone not measured, communication not checked yet")
    assert report.gates_passed(rows) == 0


def test_on_a_cpu_only_one_chips_compute_is_predicted(tmp_path):
    run = gate_run(tmp_path, gate=4, platform="cpu", device_kind="cpu", devices=4, seconds={})
    result = _measure(run)
    assert result.status == "awaiting hardware" and result.message.startswith("awaiting hardware")
    assert run.harness.asked == []
    rows = rec.read(tmp_path / "r.jsonl").records
    assert [(r.method, r.implementation) for r in rows] == [("roofline-predicted", "compute-alone")]
    assert rows[0].value == pytest.approx(roofline.predict(chips.get_chip("v5e").per_device(), COST).floor_seconds)


def test_only_a_compute_alone_criterion_is_measured_this_way(tmp_path):
    run = gate_run(tmp_path, gate=3)
    with pytest.raises(ValueError, match="not judged against a compute-alone time"):
        run.measure_against_compute_alone("beats-xla", "attention", SHAPES, "bfloat16", COST, kernel=None,
                                          compute_alone=None, kernel_inputs=None, compute_alone_inputs=None,
                                          kernel_reference=None, compute_alone_reference=None, devices=4)


def test_a_compute_alone_row_is_a_reference_and_cannot_claim_a_cpu_time(tmp_path):
    base = dict(gate=4, criterion="communication-hidden", chapter="ch14", test_id="t", tree="exercises",
                implementation="compute-alone", op="all-gather-matmul", shapes=SHAPES, dtype="bfloat16",
                chip="v5e", statistic="median", value=1e-4, unit="s", device_kind="cpu", interpret=False,
                timed_by="wall-calls")
    with pytest.raises(rec.HonestyError):
        rec.Record(method="measured", verdict="reference", platform="cpu", **base)
    row = rec.Record(method="measured", verdict="reference", platform="tpu",
                     **{**base, "device_kind": "TPU v5 lite"})
    assert row.implementation == "compute-alone"


# ---------------------------------------------------------------- gate 04 on one chip

ONE_CHIP = dict(on_accelerator=True, chips=1, device_kind="TPU v5 lite", count=4)


@pytest.mark.parametrize("facts, where, why", [
    (dict(ONE_CHIP, cpu_devices=8), placement.ON_CPU_DEVICES,
     "needs 4 chips; this run has 1 TPU v5 lite: checked on 4 CPU devices under TPU interpret mode"),
    (dict(ONE_CHIP, cpu_devices=1), placement.NOWHERE,
     "needs 4 chips; this run has 1 TPU v5 lite, and 1 CPU device to simulate them on"),
    (dict(ONE_CHIP, chips=4, cpu_devices=1), placement.ON_CHIP, ""),
    (dict(ONE_CHIP, on_accelerator=False, cpu_devices=8), placement.RUN_DEVICES, ""),
])
def test_where_a_four_device_check_runs(facts, where, why):
    placed = placement.placement(**facts)
    assert (placed.where, placed.why) == (where, why)
    assert placed.off_chip == (where in (placement.ON_CPU_DEVICES, placement.RUN_DEVICES))
    assert placement.chips_short(placement.too_few_chips(4, 1, "TPU v5 lite")) == (4, 1)


def test_one_chip_checks_the_collectives_on_cpu_devices_and_says_off_chip_verified(tmp_path):
    import jax

    from pytest_tpucourse.core import jax_internals

    run = gate_run(tmp_path, gate=4, devices=1, kernels_native=True, seconds={"compute-alone": 1e-4})
    slot = criteria.gate(4).criterion("correct").slots[0]
    before = jax_internals.interpret_mode_in_effect()
    with run.devices("correct", slot.op, slot.shapes, slot.dtype, 4) as devices:
        assert [d.platform for d in devices] == ["cpu"] * 4
        assert jax_internals.interpret_mode_in_effect() is not None  # TPU interpret mode, also beside a chip
        assert jax.numpy.zeros(()).devices() == {devices[0]}  # what the check makes lives with its mesh
        result = run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None)
    assert jax_internals.interpret_mode_in_effect() is before
    assert result.status == "off-chip verified"
    [row] = rec.read(tmp_path / "r.jsonl").records
    assert (row.method, row.interpret) == ("off-chip-verified", True)  # never measured: no chip ran it
    assert row.notes.startswith("needs 4 chips; this run has 1 TPU v5 lite: checked on 4 CPU devices under TPU "
                                "interpret mode; the chapter's differential checks")
    _measure(run, kernel=None)
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected
    statuses = report.gate_statuses(rows, "v5e")[4]
    assert statuses == {"correct": "off-chip verified", "communication-hidden": "not runnable here"}
    note = "not runnable on one chip (needs 4 chips): compute alone measured, communication off-chip verified"
    assert report.too_few_chips(rows, 4, "v5e", statuses) == note
    assert f"  {note}" in report.gate_table_lines(rows, "v5e")
    assert report.gate_label(rows, 4) == f"{note} (v5e)"


def test_with_nowhere_to_simulate_the_chips_the_check_is_recorded_not_runnable(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "cpu_device_count", lambda: 1)
    run = gate_run(tmp_path, gate=4, devices=1)
    slot = criteria.gate(4).criterion("correct").slots[0]
    with run.devices("correct", slot.op, slot.shapes, slot.dtype, 4) as devices:
        assert devices is None
    assert run.results[-1].status == "not runnable here"
    [row] = rec.read(tmp_path / "r.jsonl").records
    assert (row.verdict, row.statistic) == ("not-runnable", "too-few-chips")


def test_the_bench_page_says_what_gate_04_on_one_chip_still_checked(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=1, tree="solutions", seconds={"compute-alone": 1e-4})
    slot = criteria.gate(4).criterion("correct").slots[0]
    with run.devices("correct", slot.op, slot.shapes, slot.dtype, 4):
        run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None)
    _measure(run, kernel=None)
    page = report.bench_readme(report.load([tmp_path / "r.jsonl"], chips.ChipRegistry(), tree="solutions"))
    assert ("| 04 Distributed Pallas | Communication hidden behind compute: the collective matmul within striking "
            "distance of its compute alone, itself within 1.5x of its roofline floor | project's | not runnable on one chip (needs 4 chips): compute alone "
            "measured, communication off-chip verified |") in page


def test_nothing_is_timed_where_the_chips_are_simulated(tmp_path):
    """Inside devices() on CPU devices the kernels run under TPU interpret mode: a measurement asked
    for there times nothing and writes no measured row, only the prediction."""
    run = gate_run(tmp_path, gate=4, devices=1, seconds={"compute-alone": 1e-4, "kernel": 1e-4})
    slot = criteria.gate(4).criterion("correct").slots[0]
    with run.devices("correct", slot.op, slot.shapes, slot.dtype, 4):
        result = _measure(run)
    assert result.status == "nothing timed" and "nothing is timed where the chips are simulated" in result.message
    assert run.harness.asked == []
    assert {r.method for r in rec.read(tmp_path / "r.jsonl").records} == {"roofline-predicted"}
