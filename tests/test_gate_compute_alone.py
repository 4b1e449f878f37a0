"""Gate 04's timing: a distributed kernel against its compute alone, and runs with too few chips.

No accelerator is available to these tests: the harness is fake (tests/gate_helpers.py),
so they prove which rows are written and how they are judged, never a number.
"""

import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates import report

from .gate_helpers import gate_run, read_judged

COST = roofline.matmul_cost(1024, 512, 16384, "bfloat16")
SHAPES = [(1024, 512), (512, 4 * 16384)]


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
    assert mine["compute-alone"].verdict == "reference" and mine["compute-alone"].ratio_to_floor is None
    assert mine["kernel"].verdict == "pass" and mine["kernel"].ratio_to_compute_alone == pytest.approx(1.05)
    assert mine["kernel"].run_id == mine["compute-alone"].run_id
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "pass"
    assert sorted(run.store.stored, key=str) == sorted([None, "compute-alone"], key=str)


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


def test_one_chip_records_that_it_needs_four_never_a_pass(tmp_path):
    run = gate_run(tmp_path, gate=4, devices=1, seconds={})
    result = _measure(run)
    assert result.status == "not runnable here" and "needs 4 chips; this run has 1 TPU v5 lite" in result.message
    assert run.harness.asked == []  # nothing is timed with too few chips
    rows = rec.read(tmp_path / "r.jsonl").records
    kernel = [r for r in rows if r.method == "measured"]
    assert [(r.implementation, r.verdict, r.value) for r in kernel] == [("kernel", "not-runnable", None)]
    assert "needs 4 chips" in kernel[0].notes
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "not runnable here"
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
                chip="v5e", statistic="median", value=1e-4, unit="s", device_kind="cpu", interpret=False)
    with pytest.raises(rec.HonestyError):
        rec.Record(method="measured", verdict="reference", platform="cpu", **base)
    row = rec.Record(method="measured", verdict="reference", platform="tpu",
                     **{**base, "device_kind": "TPU v5 lite"})
    assert row.implementation == "compute-alone"
