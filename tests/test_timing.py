"""Timing: the (floor, kernel, ceiling) trio, and the real pytest-benchmark path.

No accelerator is available to these tests. The trio runs with a fake timer; the
real BenchmarkTimer runs through pytest-benchmark's own fixture in a pytester run
on a device the pytest_tpucourse_device hook reports as a TPU, timing a trivial
jitted function on the CPU. Neither says anything about TPU speed: they prove the
code path that writes measured rows, not a number.
"""

import json
import textwrap

import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import criteria as gates
from pytest_tpucourse.gates import report
from pytest_tpucourse.gates.run import GateRun
from pytest_tpucourse.gates.timer import ROUNDS, Stats
from pytest_tpucourse.gates.provenance import Provenance
from pytest_tpucourse.gates import records as rec

COST = roofline.elementwise_cost((256, 256), "bfloat16")
FLOOR = 3 * 256 * 256 * 2 / 8.2e11  # v5e roofline floor of that add


class FakeTimer:
    """Returns a fixed median per implementation label (None is the kernel)."""

    def __init__(self, seconds: dict):
        self.seconds, self.labels = seconds, []

    def __call__(self, label=None):
        self.labels.append(label)
        median = self.seconds[label or "kernel"]
        return type("T", (), {"measure": lambda _, fn, sets: Stats(median, median / 100, 30)})()


def _run(tmp_path, gate=3, platform="tpu", device_kind="TPU v5 lite", chip="v5e", timer=None, marker_cost=None):
    return GateRun(
        gate=gate, chapter=gates.gate(gate).chapter, test_id="t::trio", chip=chips.get_chip(chip),
        on_accelerator=platform in rec.ACCELERATORS,
        provenance=Provenance(platform, device_kind, "0.10.2", "0.10.2", None, None, "host"),
        records_path=tmp_path / "r.jsonl", timer_factory=timer, marker_cost=marker_cost,
    )


def _trio(run, criteria=("beats-xla", "near-ceiling"), **kw):
    fns = dict(floor=lambda *a: None, kernel=lambda *a: None, ceiling=lambda *a: None)
    return run.measure_trio(criteria, "add", [(256, 256), (256, 256)], "bfloat16", kw.pop("cost", COST),
                            input_sets=[(1, 2)], **{**fns, **kw})


def test_a_trio_writes_one_row_per_implementation_and_judges_the_kernel(tmp_path):
    timer = FakeTimer({"floor": 1e-4, "kernel": 7e-5, "ceiling": 6.5e-5})
    run = _run(tmp_path, timer=timer)
    stats = _trio(run)
    assert set(stats) == {"floor", "kernel", "ceiling"} and timer.labels == ["floor", None, "ceiling"]
    rows = rec.read(tmp_path / "r.jsonl")
    for criterion in ("beats-xla", "near-ceiling"):
        mine = {r.implementation: r for r in rows if r.criterion == criterion and r.method == "measured"}
        assert set(mine) == {"floor", "kernel", "ceiling"}
        assert mine["floor"].verdict == mine["ceiling"].verdict == "reference"
        assert mine["kernel"].verdict == "pass"
        assert mine["kernel"].ratio_to_floor == pytest.approx(0.7)
        assert mine["kernel"].ratio_to_ceiling == pytest.approx(7 / 6.5)
        assert mine["floor"].ratio_to_floor == 1 and mine["ceiling"].ratio_to_ceiling == 1
        assert mine["kernel"].spread == pytest.approx(7e-7)
    statuses = report.gate_statuses(rows, "v5e")[3]
    assert statuses["beats-xla"] == statuses["near-ceiling"] == "pass"
    assert statuses["correct"] == "awaiting hardware"
    # a later CPU run predicts the same floors: nothing new is appended, the measurement stays
    with pytest.raises(pytest.skip.Exception):
        _trio(_run(tmp_path, platform="cpu", device_kind="cpu"))
    assert rec.read(tmp_path / "r.jsonl") == rows


@pytest.mark.parametrize("kernel_s, ceiling_s, failed", [
    (9e-5, 8.5e-5, "beats-xla: kernel 90.0 us is 0.90x the floor"),  # not decisively faster than XLA
    (7.6e-5, 6.5e-5, "near-ceiling: kernel 76.0 us is 1.17x the ceiling"),  # too far behind the ceiling
])
def test_a_slow_kernel_fails_its_criterion_and_the_row_stays(tmp_path, kernel_s, ceiling_s, failed):
    run = _run(tmp_path, timer=FakeTimer({"floor": 1e-4, "kernel": kernel_s, "ceiling": ceiling_s}))
    with pytest.raises(pytest.fail.Exception, match=failed):
        _trio(run)
    rows = rec.read(tmp_path / "r.jsonl")
    assert [r.criterion for r in rec.failures(rows)] == [failed.split(":")[0]]
    assert report.gate_statuses(rows, "v5e")[3][failed.split(":")[0]] == "fail"


def test_on_a_gpu_tpu_kernels_are_not_runnable_never_passed(tmp_path):
    timer = FakeTimer({"floor": 1e-4})
    run = _run(tmp_path, platform="gpu", device_kind="NVIDIA H200", chip="h200", timer=timer)
    with pytest.raises(pytest.skip.Exception, match="kernel not runnable on NVIDIA H200 .h200.: recorded as not runnable; measured: floor$"):
        _trio(run)
    assert timer.labels == ["floor"]  # only XLA was timed
    rows = rec.read(tmp_path / "r.jsonl")
    measured = {(r.criterion, r.implementation): r.verdict for r in rows if r.method == "measured"}
    assert measured == {(c, i): v for c in ("beats-xla", "near-ceiling")
                        for i, v in (("floor", "reference"), ("kernel", "not-runnable"), ("ceiling", "not-runnable"))}
    assert all(r.value is None for r in rows if r.verdict == "not-runnable")
    assert set(report.gate_statuses(rows, "h200")[3].values()) == {"awaiting hardware", "not runnable here"}
    assert report.gates_passed(rows) == 0


def test_on_a_cpu_a_trio_only_predicts(tmp_path):
    def no_timing(label=None):
        raise AssertionError("nothing may be timed on a CPU")

    run = _run(tmp_path, platform="cpu", device_kind="cpu", timer=no_timing)
    with pytest.raises(pytest.skip.Exception, match="awaiting hardware: add bfloat16 roofline floor predicted for v5e"):
        _trio(run)
    rows = rec.read(tmp_path / "r.jsonl")
    assert {(r.criterion, r.method, r.implementation) for r in rows} == {
        ("beats-xla", "roofline-predicted", "floor"), ("near-ceiling", "roofline-predicted", "floor")}
    assert rows[0].value == pytest.approx(FLOOR)


def test_the_roofline_marker_gives_the_cost_of_the_recorded_floor(tmp_path):
    marker = roofline.Cost(flops=1e9, bytes=8.2e5)  # v5e: 5.1 us of compute, 1 us of HBM traffic
    run = _run(tmp_path, platform="cpu", device_kind="cpu", marker_cost=marker)
    with pytest.raises(pytest.skip.Exception):
        _trio(run, cost=None)
    rows = rec.read(tmp_path / "r.jsonl")
    assert [r.value for r in rows] == [pytest.approx(1e9 / 1.97e14)] * 2  # compute-bound: 5.1 us
    assert {r.notes for r in rows} == {"compute-bound"}
    with pytest.raises(ValueError, match="no cost for the roofline floor"):
        _trio(_run(tmp_path, platform="cpu", device_kind="cpu"), cost=None)
    with pytest.raises(ValueError, match=r"the call's cost \(65536 FLOPs.*disagrees with its roofline marker \(1e\+09"):
        _trio(run)
    with pytest.raises(pytest.skip.Exception):  # the same cost twice is fine
        _trio(run, cost=marker)


@pytest.mark.parametrize("kw, message", [
    (dict(criteria="correct"), "criterion correct is not judged against a measured floor or ceiling"),
    (dict(criteria="fast"), "gate 03 has no criterion 'fast'"),
    (dict(ceiling=None), "criterion near-ceiling needs a ceiling kernel"),
    (dict(floor=None), "needs the XLA floor implementation"),
])
def test_a_trio_rejects_what_it_cannot_judge(tmp_path, kw, message):
    run = _run(tmp_path, timer=FakeTimer({}))
    with pytest.raises((ValueError, KeyError), match=message):
        _trio(run, **kw)
    assert not (tmp_path / "r.jsonl").exists()


def test_rows_that_cannot_be(tmp_path):
    from .test_records import MEASURED, make_record

    with pytest.raises(ValueError, match="a reference row is a measured floor or ceiling"):
        make_record(verdict="reference", method="roofline-predicted")
    with pytest.raises(ValueError, match="a reference row is a measured floor or ceiling"):
        make_record(**{**MEASURED, "verdict": "reference", "implementation": "kernel"})
    with pytest.raises(ValueError, match="a not-runnable row is a kernel or ceiling"):
        make_record(**{**MEASURED, "verdict": "not-runnable", "implementation": "floor", "value": None})
    with pytest.raises(ValueError, match="a not-runnable row is a kernel or ceiling"):
        make_record(**{**MEASURED, "verdict": "not-runnable", "implementation": "kernel"})  # has a value
    with pytest.raises(ValueError, match="value must be a finite number"):
        make_record(value=None)
    with pytest.raises(rec.HonestyError, match="a cpu run cannot write a measured row"):
        make_record(**{**MEASURED, "verdict": "not-runnable", "implementation": "kernel", "value": None,
                       "platform": "cpu", "device_kind": "cpu"})


# The real path: pytest-benchmark's fixture, on a device the hook calls a TPU.

REAL_BENCHMARK_CONFTEST = """
    def pytest_tpucourse_device(config):
        return ("tpu", "TPU v5 lite")
"""

REAL_BENCHMARK_TEST = """
    import jax
    import jax.numpy as jnp
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    @pytest.mark.roofline(flops=64 * 64, bytes=8.2e6)  # made up: a 10 us floor on v5e
    def test_add(gate_run):
        xs = [(jnp.full((64, 64), i, jnp.float32), jnp.ones((64, 64), jnp.float32)) for i in range(3)]
        gate_run.measure_floor("roofline-predicts", "add", [(64, 64), (64, 64)], "float32",
                               None, jax.jit(jnp.add), xs)

    @pytest.mark.gate(3)
    def test_trio(gate_run):
        xs = [(jnp.full((64, 64), i, jnp.float32),) for i in range(3)]
        gate_run.measure_trio("beats-xla", "double", [(64, 64)], "float32", roofline.Cost(1, 1),
                              floor=jax.jit(lambda x: x * 2), kernel=jax.jit(lambda x: x + x),
                              ceiling=jax.jit(lambda x: x * 2.0), input_sets=xs, tpu_only=())
"""


def test_the_real_benchmark_fixture_writes_measured_rows(fake_course):
    pytester = fake_course.pytester
    (pytester.path / "conftest.py").write_text(textwrap.dedent(REAL_BENCHMARK_CONFTEST))
    fake_course.test_file(REAL_BENCHMARK_TEST, "test_gate.py")
    records, bench_json = pytester.path / "records.jsonl", pytester.path / "bench.json"
    result = fake_course.run("--gates", "--records", str(records), f"--benchmark-json={bench_json}", "-rsf")
    rows = rec.read(records)
    measured = [r for r in rows if r.method == "measured"]
    # gate 0's verdict depends on how fast this CPU adds; the row is what is checked here
    add = [r for r in measured if r.gate == 0]
    assert add[0].ratio_to_floor == pytest.approx(add[0].value / 1e-5)  # the roofline marker's floor
    assert len(add) == 1 and add[0].statistic == "median" and add[0].unit == "s"
    assert add[0].chip == "v5e" and add[0].platform == "tpu" and add[0].device_kind == "TPU v5 lite"
    assert add[0].value > 0 and add[0].spread is not None and add[0].ratio_to_floor is not None
    trio = {r.implementation: r for r in measured if r.gate == 3}
    assert set(trio) == {"floor", "kernel", "ceiling"}
    assert all(r.value > 0 and r.spread >= 0 for r in trio.values())
    assert "rounds over 3 input sets" in trio["kernel"].notes

    report = json.loads(bench_json.read_text())
    assert report["machine_info"]["tpucourse"]["chip"] == "v5e"
    assert report["machine_info"]["tpucourse"]["device_kind"] == "TPU v5 lite"
    assert report["machine_info"]["tpucourse"]["jax"] == __import__("jax").__version__
    assert report["machine_info"]["tpucourse"]["jaxlib"] == __import__("jaxlib").__version__
    names = sorted(b["name"] for b in report["benchmarks"])
    assert names == ["test_add", "test_trio", "test_trio[ceiling]", "test_trio[floor]"]
    by_name = {b["name"]: b for b in report["benchmarks"]}
    assert by_name["test_trio"]["stats"]["median"] == pytest.approx(trio["kernel"].value)
    assert by_name["test_trio"]["stats"]["iqr"] == pytest.approx(trio["kernel"].spread)
    assert by_name["test_trio[floor]"]["stats"]["median"] == pytest.approx(trio["floor"].value)
    assert by_name["test_add"]["stats"]["rounds"] == ROUNDS
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)


def test_benchmarks_disabled_is_an_error_not_a_pass(fake_course):
    pytester = fake_course.pytester
    (pytester.path / "conftest.py").write_text(textwrap.dedent(REAL_BENCHMARK_CONFTEST))
    fake_course.test_file(REAL_BENCHMARK_TEST, "test_gate.py")
    records = pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--records", str(records), "--benchmark-disable", "-k", "trio")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*pytest-benchmark timed nothing: benchmarks are disabled*"])
    assert all(r.method != "measured" for r in rec.read(records))


def test_the_real_cpu_path_never_writes_measured(fake_course):
    """No device hook: JAX's own CPU. A --gates run predicts and skips, and times nothing."""
    fake_course.test_file(REAL_BENCHMARK_TEST, "test_gate.py")
    records, bench_json = fake_course.pytester.path / "records.jsonl", fake_course.pytester.path / "b.json"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records), f"--benchmark-json={bench_json}")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=2)
    rows = rec.read(records)
    assert rows and {r.method for r in rows} == {"roofline-predicted"}
    assert {(r.platform, r.verdict) for r in rows} == {("cpu", "pending")}
    assert not bench_json.exists() or json.loads(bench_json.read_text())["benchmarks"] == []


# ------------------------------------------------------- correctness criteria

def _verify(run, check):
    return run.verify("correct", "matmul", [(8, 8), (8, 8)], "bfloat16", check)


def test_correctness_under_interpret_mode_is_off_chip_verified(tmp_path):
    run = _run(tmp_path, gate=1, platform="cpu", device_kind="cpu")
    row = _verify(run, lambda: None)
    assert (row.method, row.verdict, row.interpret, row.unit) == ("off-chip-verified", "pass", True, "check")
    statuses = report.gate_statuses(rec.read(tmp_path / "r.jsonl"), "v5e")
    assert statuses[1]["correct"] == gates.PASS_OFF_CHIP
    assert report.gates_passed(rec.read(tmp_path / "r.jsonl")) == 0


def test_correctness_run_natively_on_the_chip_is_measured(tmp_path):
    run = _run(tmp_path, gate=1)
    run.interpreted = False
    row = _verify(run, lambda: None)
    assert (row.method, row.verdict, row.interpret) == ("measured", "pass", False)
    interpreted = _run(tmp_path, gate=1)  # a TPU, but --interpret tpu: not a hardware result
    assert _verify(interpreted, lambda: None).method == "off-chip-verified"


def test_a_failed_check_is_recorded_then_raised_and_a_todo_writes_nothing(tmp_path):
    from pytest_tpucourse.outcomes import Todo, WrongResult

    run = _run(tmp_path, gate=1, platform="cpu", device_kind="cpu")

    def wrong():
        raise WrongResult("matmul() in exercises/ch11/matmul.py: output is wrong: ...")

    with pytest.raises(WrongResult):
        _verify(run, wrong)
    [row] = rec.read(tmp_path / "r.jsonl")
    assert row.verdict == "fail" and "output is wrong" in row.notes

    def todo():
        raise Todo("TODO: matmul() is not written yet.")

    with pytest.raises(Todo):
        _verify(run, todo)
    assert len(rec.read(tmp_path / "r.jsonl")) == 1
    with pytest.raises(ValueError, match="not a correctness criterion"):
        run.verify("matmul-near-xla", "matmul", [(8, 8)], "bfloat16", lambda: None)
