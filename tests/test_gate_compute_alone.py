"""Gate 04's timing: a distributed kernel against its compute alone, and runs with too few chips.

No accelerator is available to these tests: the timer is fake (see test_timing.py), so
they prove which rows are written and how they are judged, never a number.
"""

import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates import report

from .test_timing import FakeTimer, _run

COST = roofline.matmul_cost(512, 256, 8192, "bfloat16")
SHAPES = [(512, 256), (256, 32768)]


def _measure(run, devices=4):
    return run.measure_against_compute_alone(
        "communication-hidden", "all-gather-matmul", SHAPES, "bfloat16", COST,
        kernel=lambda *a: None, compute_alone=lambda *a: None, kernel_inputs=[(1, 2)],
        compute_alone_inputs=[(1, 2)], devices=devices)


def test_the_kernel_is_judged_by_its_time_over_its_compute_alone(tmp_path):
    timer = FakeTimer({"compute-alone": 1e-4, "kernel": 1.1e-4})
    stats = _measure(_run(tmp_path, gate=4, timer=timer))
    assert set(stats) == {"kernel", "compute-alone"} and timer.labels == ["compute-alone", None]
    rows = [r for r in rec.read(tmp_path / "r.jsonl") if r.method == "measured"]
    mine = {r.implementation: r for r in rows}
    assert mine["compute-alone"].verdict == "reference" and mine["compute-alone"].ratio_to_floor is None
    assert mine["kernel"].verdict == "pass" and mine["kernel"].ratio_to_compute_alone == pytest.approx(1.1)
    assert report.gate_statuses(rec.read(tmp_path / "r.jsonl"), "v5e")[4]["communication-hidden"] == "pass"


def test_communication_not_hidden_fails_and_the_row_stays(tmp_path):
    run = _run(tmp_path, gate=4, timer=FakeTimer({"compute-alone": 1e-4, "kernel": 1.6e-4}))
    with pytest.raises(pytest.fail.Exception, match="is 1.60x its compute alone"):
        _measure(run)
    rows = rec.read(tmp_path / "r.jsonl")
    assert [r.implementation for r in rec.failures(rows)] == ["kernel"]
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "fail"


def test_one_chip_records_that_it_needs_four_never_a_pass(tmp_path, monkeypatch):
    import jax

    monkeypatch.setattr(jax, "device_count", lambda: 1)

    def no_timing(label=None):
        raise AssertionError("nothing may be timed with too few chips")

    with pytest.raises(pytest.skip.Exception, match="needs 4 chips; this run has 1 TPU v5 lite"):
        _measure(_run(tmp_path, gate=4, timer=no_timing))
    rows = rec.read(tmp_path / "r.jsonl")
    kernel = [r for r in rows if r.method == "measured"]
    assert [(r.implementation, r.verdict, r.value) for r in kernel] == [("kernel", "not-runnable", None)]
    assert "needs 4 chips" in kernel[0].notes
    assert report.gate_statuses(rows, "v5e")[4]["communication-hidden"] == "not runnable here"
    assert report.gates_passed(rows) == 0


def test_on_a_cpu_only_one_chips_compute_is_predicted(tmp_path):
    def no_timing(label=None):
        raise AssertionError("nothing may be timed on a CPU")

    with pytest.raises(pytest.skip.Exception, match="awaiting hardware"):
        _measure(_run(tmp_path, gate=4, platform="cpu", device_kind="cpu", timer=no_timing))
    rows = rec.read(tmp_path / "r.jsonl")
    assert [(r.method, r.implementation) for r in rows] == [("roofline-predicted", "compute-alone")]
    assert rows[0].value == pytest.approx(roofline.predict(chips.get_chip("v5e").per_device(), COST).floor_seconds)


def test_only_a_compute_alone_criterion_is_measured_this_way(tmp_path):
    run = _run(tmp_path, gate=3, timer=FakeTimer({}))
    with pytest.raises(ValueError, match="not judged against a compute-alone time"):
        run.measure_against_compute_alone("beats-xla", "attention", SHAPES, "bfloat16", COST, kernel=None,
                                          compute_alone=None, kernel_inputs=[], compute_alone_inputs=[],
                                          devices=4)


def test_a_compute_alone_row_is_a_reference_and_cannot_claim_a_cpu_time(tmp_path):
    base = dict(gate=4, criterion="communication-hidden", chapter="ch14", test_id="t",
                implementation="compute-alone", op="all-gather-matmul", shapes=SHAPES, dtype="bfloat16",
                chip="v5e", statistic="median", value=1e-4, unit="s", device_kind="cpu", interpret=False)
    with pytest.raises(rec.HonestyError):
        rec.Record(method="measured", verdict="reference", platform="cpu", **base)
    row = rec.Record(method="measured", verdict="reference", platform="tpu",
                     **{**base, "device_kind": "TPU v5 lite"})
    assert row.implementation == "compute-alone"
