"""Gates as data, gate status from records, and `pytest --gates` end to end.

No accelerator is available to these tests: the measured path runs with a fake
device (the pytest_tpucourse_device hook) and a fake timer (the tpucourse_timer
fixture overridden in a conftest).
"""

import json

import pytest

from pytest_tpucourse.gates import criteria as gates
from pytest_tpucourse.gates import report
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.course import load_course

from .support import REPO
from .test_records import make_record

GATE_TEST = """
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    def test_add_near_floor(gate_run):
        import jax.numpy as jnp
        x = jnp.ones((256, 256), jnp.bfloat16)
        gate_run.measure_floor("roofline-predicts", "add", [(256, 256), (256, 256)], "bfloat16",
                               roofline.elementwise_cost((256, 256), "bfloat16"), jnp.add, [(x, x)])
"""

FAKE_TPU = """
    import pytest
    from pytest_tpucourse.gates.timer import Stats

    def pytest_tpucourse_device(config):
        return ("tpu", "TPU v5 lite")

    class FakeTimer:
        def __init__(self, label=None):
            self.label = label

        def measure(self, fn, input_sets, rounds=30):
            return Stats(median={seconds}, iqr=1e-8, rounds=rounds)

    @pytest.fixture
    def tpucourse_timer():
        return FakeTimer
"""


def test_gates_match_the_course():
    course = load_course(REPO)
    assert [(g.number, g.chapter) for g in gates.GATES] == [
        (c.gate, c.id) for c in course.chapters if c.gate is not None
    ]
    assert len(gates.GATES) == course.gates_total == 6


def test_gate5_criteria_in_the_course_words():
    texts = [c.text for c in gates.gate(5).criteria]
    assert texts[0] == "Correct under the differential suite"
    assert "beats XLA decisively at target shapes" in texts[1]
    assert "within striking distance of the hand-tuned ceiling" in texts[2]
    assert texts[3] == "The upstream submission exists in public"


def test_thresholds():
    beats = gates.gate(3).criterion("beats-xla")
    assert beats.judge(0.8) == "pass" and beats.judge(0.81) == "fail"
    near = gates.gate(3).criterion("near-ceiling")
    assert near.judge(1.15) == "pass" and near.judge(1.16) == "fail"
    band = gates.gate(0).criterion("roofline-predicts")
    assert [band.judge(r) for r in (0.94, 0.95, 1.5, 1.51)] == ["fail", "pass", "pass", "fail"]
    with pytest.raises(ValueError, match="not judged by a time ratio"):
        gates.gate(1).criterion("correct").judge(1.0)
    with pytest.raises(KeyError, match="gate 01 has no criterion 'fast'"):
        gates.gate(1).criterion("fast")
    with pytest.raises(ValueError, match="no gate 6"):
        gates.gate(6)


def _row(**kw):
    base = dict(gate=1, criterion="correct", implementation="kernel", method="off-chip-verified",
                statistic="relative-error", value=1e-5, unit="relative error", verdict="pass",
                platform="cpu", device_kind="cpu", interpret=True)
    return make_record(**{**base, **kw})


def test_status_from_records():
    c = gates.gate(1).criterion("correct")
    assert gates.criterion_status(c, []) == "awaiting hardware"
    assert gates.criterion_status(c, [_row()]) == "pass (off-chip)"
    assert gates.criterion_status(c, [_row(verdict="fail")]) == "fail"
    measured = _row(method="measured", platform="tpu", device_kind="TPU v5 lite", interpret=False)
    assert gates.criterion_status(c, [measured]) == "pass"
    speed = gates.gate(0).criterion("roofline-predicts")
    predicted = make_record()
    assert gates.criterion_status(speed, [predicted]) == "awaiting hardware"


def test_a_gate_passes_only_on_measured_rows():
    off_chip = [_row(), _row(criterion="matmul-near-xla", op="matmul", implementation="floor",
                             method="roofline-predicted", statistic="floor", value=1e-3, unit="s",
                             verdict="pending")]
    assert report.gates_passed(off_chip) == 0
    on_chip = dict(method="measured", platform="tpu", device_kind="TPU v5 lite", interpret=False)
    rows = [_row(**on_chip)] + [
        _row(criterion=c, statistic="median", value=1e-3, unit="s", **on_chip)
        for c in ("matmul-near-xla", "fused-beats-unfused")
    ]
    assert report.gates_passed(rows) == 1
    assert report.gates_passed(rows + [_row(verdict="fail", **{**on_chip, "date": "2099-01-01T00:00:00+00:00"})]) == 0


def test_gates_on_a_cpu_predict_and_await_hardware(fake_course):
    fake_course.test_file(GATE_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records), "-rs")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*gates for chip v5e (predicted only*",
        "gates for v5e*",
        "gate 00 The machine (ch10)",
        "  awaiting hardware  The roofline predicts this chip*",
        "gates: 0/6 gates passed*",
        "*awaiting hardware: add bfloat16 roofline floor predicted for v5e*",
    ])
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["method"], r["chip"], r["verdict"]) for r in rows] == [("roofline-predicted", "v5e", "pending")]
    assert rows[0]["value"] == pytest.approx(3 * 256 * 256 * 2 / 8.2e11)
    # the same prediction is not appended twice
    fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert len(records.read_text().splitlines()) == 1


@pytest.mark.parametrize("seconds, outcome", [(1.2, "passed"), (10.0, "failed")])
def test_gates_on_a_fake_tpu_write_measured_rows(fake_course, seconds, outcome):
    fake_course.test_file(GATE_TEST, "test_gate.py")
    floor = 3 * 256 * 256 * 2 / 8.2e11
    (fake_course.pytester.path / "conftest.py").write_text(
        __import__("textwrap").dedent(FAKE_TPU.format(seconds=seconds * floor)))
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--records", str(records))
    result.assert_outcomes(**{outcome: 1})
    rows = rec.read(records)
    measured = [r for r in rows if r.method == "measured"]
    assert len(measured) == 1 and measured[0].chip == "v5e"
    assert measured[0].ratio_to_floor == pytest.approx(seconds)
    if outcome == "passed":
        result.stdout.fnmatch_lines(["  pass  *The roofline predicts this chip*", "gates: 1/6 gates passed*"])
    else:
        result.stdout.fnmatch_lines(["*is 10.00x its roofline floor*outside ?0.95, 1.5?",
                                     "  fail  *The roofline predicts this chip*", "gates: 0/6 gates passed*"])


def test_chip_mismatch_on_hardware_is_a_usage_error(fake_course):
    (fake_course.pytester.path / "conftest.py").write_text(
        "def pytest_tpucourse_device(config):\n    return ('tpu', 'TPU v5 lite')\n")
    result = fake_course.run("--gates", "--chip=v6e")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--chip v6e but this run executes on 'TPU v5 lite' (v5e)*"])


def test_a_registered_chip_is_accepted_by_chip(fake_course):
    (fake_course.pytester.path / "conftest.py").write_text(
        "from pytest_tpucourse.chips import Chip\n"
        "def pytest_tpucourse_register_chips():\n"
        "    return [Chip('mychip', 'tpu', 4e14, 1e12, 32e9)]\n")
    fake_course.test_file("def test_chip(request):\n    assert request.config.getoption('chip') == 'mychip'\n")
    fake_course.run("--chip", "MyChip").assert_outcomes(passed=1)
    assert fake_course.run("--chip", "other").ret == pytest.ExitCode.USAGE_ERROR


def test_corrupt_records_fail_a_gates_run(fake_course):
    records = fake_course.pytester.path / "records.jsonl"
    records.write_text("{not json\n")
    result = fake_course.run("--gates", "--records", str(records))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"gate records unreadable: {records}:1: not a valid row*"])


def test_roofline_marker_attaches_a_prediction(fake_course):
    fake_course.test_file("""
        import pytest

        @pytest.mark.roofline(flops=2 * 4096**3, bytes=3 * 2 * 4096**2)
        def test_matmul(roofline_prediction, record_property):
            assert roofline_prediction.chip == "v6e"
            assert roofline_prediction.bound == "compute"
    """)
    fake_course.run("--chip", "v6e").assert_outcomes(passed=1)


XDIST_GATE_TESTS = """
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    @pytest.mark.parametrize("n", [128, 256, 384, 512, 640, 768])
    def test_add_near_floor(gate_run, n):
        import jax.numpy as jnp
        x = jnp.ones((n, n), jnp.bfloat16)
        gate_run.measure_floor("roofline-predicts", "add", [(n, n), (n, n)], "bfloat16",
                               roofline.elementwise_cost((n, n), "bfloat16"), jnp.add, [(x, x)])
"""


@pytest.mark.parametrize("device", ["cpu", "fake-tpu"])
def test_gates_under_xdist_write_every_row_once_and_print_one_table(fake_course, device):
    fake_course.test_file(XDIST_GATE_TESTS, "test_gate.py")
    if device == "fake-tpu":  # every median 1.2x its floor: all pass
        (fake_course.pytester.path / "conftest.py").write_text(
            __import__("textwrap").dedent(FAKE_TPU.format(seconds="1.2 * 3 * fn_size(input_sets) * 2 / 8.2e11"))
            + "\ndef fn_size(input_sets):\n    return input_sets[0][0].size\n")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("-n", "2", "--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(**({"skipped": 6} if device == "cpu" else {"passed": 6}))
    assert result.stdout.str().count("gates for v5e (pass only on measured rows") == 1
    assert result.stdout.str().count("gates: ") == 1
    rows = rec.read(records)
    method = "roofline-predicted" if device == "cpu" else "measured"
    tests = sorted(r.test_id for r in rows if r.method == method)
    assert tests == sorted(f"exercises/ch11/test_gate.py::test_add_near_floor[{n}]"
                           for n in (128, 256, 384, 512, 640, 768))
    assert len(rows) == (6 if device == "cpu" else 12)  # on the chip: the prediction, then the measurement
    if device == "fake-tpu":
        result.stdout.fnmatch_lines(["  pass  *The roofline predicts this chip*", "gates: 1/6 gates passed*"])


def test_a_failing_gate_under_xdist_fails_the_run(fake_course):
    fake_course.test_file(XDIST_GATE_TESTS, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(
        __import__("textwrap").dedent(FAKE_TPU.format(seconds=1.0)))  # 1 s: far above every floor
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("-n", "2", "--gates", "--records", str(records))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=6)
    assert len(rec.failures(rec.read(records))) == 6
    result.stdout.fnmatch_lines(["  fail  *The roofline predicts this chip*", "gates: 0/6 gates passed*"])


def test_a_gates_run_lists_no_deselected_exercises(fake_course):
    fake_course.test_file("def test_double(impl):\n    assert impl.double.double(2) == 4\n")
    fake_course.test_file(GATE_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1, deselected=1)
    summary = result.stdout.str().split("= tpucourse =")[1].splitlines()
    assert not [line for line in summary if "double" in line or line.startswith(("  ----", "course: "))]
    result.stdout.fnmatch_lines(["gate 00 The machine (ch10)", "graded: *", "gates: 0/6 gates passed*"])
    # without --gates the summary is unchanged: the exercise is listed
    plain = fake_course.run("--records", str(records))
    plain.stdout.fnmatch_lines(["*double*0/1 tests passed*", "course: 0/15 chapters*"])
