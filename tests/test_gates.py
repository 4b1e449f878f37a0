"""Gates as data, gate status from records, and `pytest --gates` end to end.

No accelerator is available to these tests: the measured path runs on a stand-in
(tests/gate_helpers.py): a conftest that makes the run see a TPU and replaces the
harness's measurements with chosen times. It shows which rows are written and how
they are judged, never a number about a chip.
"""

import hashlib
import json

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.gates import criteria as gates
from pytest_tpucourse.gates import judge, report
from pytest_tpucourse.gates import records as rec

from .gate_helpers import ADD_FLOOR, GATES_TOTAL, NONE_PASSED, gate_run, make_record, read_judged, standin_conftest
from .gate_helpers import ADD_GATE_TEST as GATE_TEST
from .support import REPO


def test_gates_match_the_course():
    course = load_course(REPO)
    assert [(g.number, g.chapter) for g in gates.GATES] == [
        (c.gate, c.id) for c in course.chapters if c.gate is not None
    ]
    assert len(gates.GATES) == course.gates_total
    assert [g.number for g in gates.GATES] == list(gates.GATE_NUMBERS)  # numbered 0, 1, ... in order
    assert [g.title for g in gates.GATES] == [course.chapter(g.chapter).title for g in gates.GATES]


@pytest.mark.parametrize("gate", gates.GATES, ids=lambda g: g.label)
def test_a_gates_kernels_are_its_chapters_functions_and_its_test_runs_them(gate):
    """Each kernel the table names is a function of the gate chapter's solution and of its stub,
    and the gate's test file calls it."""
    gate_test = (REPO / gate.test_file()).read_text(encoding="utf-8")
    for kernel in gate.kernels:
        module, _, function = kernel.partition(".")
        for tree in ("solutions", "exercises"):
            source = (REPO / tree / gate.chapter / f"{module}.py").read_text(encoding="utf-8")
            assert f"\ndef {function}(" in source, f"{gate.label}: {tree}/{gate.chapter}/{module}.py has no {function}()"
        assert module in gate_test and function in gate_test, f"{gate.test_file()} never runs {kernel}"


def test_a_gate_that_times_the_learners_kernel_must_name_it():
    with pytest.raises(ValueError, match="gate 07 times the learner's own kernel: name its kernels"):
        gates.Gate(7, "ch17", "Next", (), words="project", times_own_kernel=True)


def test_gate5_criteria_in_the_course_words():
    texts = [c.text for c in gates.gate(5).criteria]
    assert texts[0] == "Correct under the differential suite"
    assert "beats XLA decisively at target shapes" in texts[1]
    assert "within striking distance of the hand-tuned ceiling" in texts[2]
    assert texts[3] == "The upstream submission exists in public"


def test_thresholds():
    """A speed criterion passes only when the whole confidence interval of its ratio is inside its range."""
    beats = gates.gate(3).criterion("beats-xla")
    assert judge.verdict_for(beats.ratio_range, (0.7, 0.8)) == "pass"
    assert judge.verdict_for(beats.ratio_range, (0.7, 0.81)) == "fail"  # straddles: not shown to beat
    near = gates.gate(3).criterion("near-ceiling")
    assert judge.verdict_for(near.ratio_range, (1.0, 1.15)) == "pass"
    assert judge.verdict_for(near.ratio_range, (1.0, 1.16)) == "fail"
    band = gates.gate(0).criterion("roofline-predicts")
    assert [judge.verdict_for(band.ratio_range, i) for i in ((0.94, 1.0), (0.95, 1.5), (1.2, 1.51))] == [
        "fail", "pass", "fail"]
    assert judge.verdict_for(band.ratio_range, None) == "fail"  # too few rounds for an interval
    assert gates.gate(1).criterion("correct").ratio_range is None  # not judged by a time ratio
    with pytest.raises(KeyError, match="gate 01 has no criterion 'fast'"):
        gates.gate(1).criterion("fast")
    with pytest.raises(ValueError, match=f"no gate {GATES_TOTAL}"):
        gates.gate(GATES_TOTAL)


def _correct_row(**kw):
    slot = gates.gate(1).criterion("correct").slots[0]
    base = dict(gate=1, criterion="correct", chapter="ch11", implementation="kernel", op=slot.op,
                shapes=slot.shapes, method="off-chip-verified", statistic="checks-passed", value=1.0,
                unit="check", verdict="pass", platform="cpu", device_kind="cpu", interpret=True)
    return make_record(**{**base, **kw})


def test_status_from_records():
    c = gates.gate(1).criterion("correct")
    assert judge.criterion_status(c, []) == "awaiting hardware"
    assert judge.criterion_status(c, [_correct_row()]) == "off-chip verified"
    assert judge.criterion_status(c, [_correct_row(verdict="fail", value=0.0)]) == "fail"
    measured = _correct_row(method="measured", platform="tpu", device_kind="TPU v5 lite", interpret=False)
    assert judge.criterion_status(c, [measured]) == "pass"
    assert judge.criterion_status(c, [_correct_row(op="another op")]) == "awaiting hardware"  # not its slot
    speed = gates.gate(0).criterion("roofline-predicts")
    assert judge.criterion_status(speed, [make_record()]) == "awaiting hardware"  # a prediction


def test_a_pass_of_code_edited_since_shows_as_older_code(tmp_path):
    graded = {"exercises/ch11/matmul.py": "a" * 64}
    rows = _gate1_rows(tmp_path, modules=graded)
    assert report.gate_label(rows, 1, current=graded) == "passed on hardware (v5e)"
    edited = {"exercises/ch11/matmul.py": "b" * 64}
    assert report.gate_label(rows, 1, current=edited) == (
        "passed on hardware (older code: a graded module changed since; v5e)")
    assert report.gates_passed(rows, current=edited) == 0


def test_a_gate_without_a_gate_test_says_so_not_awaiting_hardware(tmp_path):
    (tmp_path / "exercises" / "ch10").mkdir(parents=True)
    (tmp_path / "exercises" / "ch10" / "test_gate00.py").write_text("")
    rows = [make_record()]  # a gate 00 prediction on v5e
    assert report.gate_label(rows, 0, course_root=tmp_path) == "awaiting hardware"
    assert report.gate_label(rows, 5, course_root=tmp_path) == "no gate test yet"
    assert set(report.gate_statuses(rows, "v5e", course_root=tmp_path)[5].values()) == {"no gate test yet"}


def _gate1_rows(tmp_path, kernel_seconds=7e-5, **device):
    """Every slot of gate 01 verified and timed by the real writer (a fake harness): its rows, re-judged."""
    run = gate_run(tmp_path, gate=1, kernels_native=True, seconds={"floor": 1e-4, "kernel": kernel_seconds},
                   **device)
    g = gates.gate(1)
    for slot in g.criterion("correct").slots:
        run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None)
    for criterion in ("matmul-near-xla", "fused-beats-unfused"):
        for slot in g.criterion(criterion).slots:
            run.measure_trio(criterion, slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                             floor=lambda x: x, kernel=lambda x: x, ceiling=None,
                             inputs=lambda seed: (float(seed),))
    rows, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected, rejected
    return rows


def test_a_gate_passes_only_on_measured_rows(tmp_path):
    off_chip = _gate1_rows(tmp_path / "cpu", platform="cpu", device_kind="cpu")
    assert {r.method for r in off_chip} == {"off-chip-verified", "roofline-predicted"}
    assert report.gates_passed(off_chip) == 0
    on_chip = _gate1_rows(tmp_path / "tpu")
    assert report.gates_passed(on_chip) == 1
    assert report.gate_label(on_chip, 1) == "passed on hardware (v5e)"
    # the same slots measured again, the kernel now twice XLA's time: the latest run speaks
    again = _gate1_rows(tmp_path / "tpu", kernel_seconds=2e-4)
    assert report.gates_passed(again) == 0
    assert report.gate_label(again, 1) == "failed (v5e: fused-beats-unfused; v5e: matmul-near-xla)"


def test_gates_on_a_cpu_predict_and_await_hardware(fake_course):
    fake_course.test_file(GATE_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records), "-rs")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*gates for chip v5e (predicted only*",
        "gates for v5e*",
        "gate 00 The machine (ch10), *s this run",
        "  awaiting hardware  The roofline predicts this chip*",
        f"{NONE_PASSED}*",
        "*awaiting hardware: add bfloat16 roofline floor predicted for v5e*",
    ])
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["method"], r["chip"], r["verdict"]) for r in rows] == [("roofline-predicted", "v5e", "pending")]
    assert rows[0]["value"] == pytest.approx(ADD_FLOOR)
    # the same prediction is not appended twice
    fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert len(records.read_text().splitlines()) == 1


def test_a_helper_with_a_leading_underscore_does_not_break_the_chapters_gate_tests(fake_course):
    """A chapter's helper module `_tiles.py` is no `impl` attribute: the gate row hashes it as the
    graded modules ran it, and the gate test runs (it used to error with AttributeError)."""
    fake_course.test_file(GATE_TEST.replace("def test_add_near_floor(gate_run):",
                                                "def test_add_near_floor(gate_run, impl):"), "test_gate.py")
    fake_course.write("exercises", "double", "from ._tiles import twice\n\n\ndef double(x):\n    return twice(x)\n")
    helper = fake_course.write("exercises", "_tiles", "def twice(x):\n    return x * 2\n")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records), "-rs")
    assert result.ret == pytest.ExitCode.OK and "AttributeError" not in result.stdout.str()
    result.assert_outcomes(skipped=1)
    [row] = [json.loads(line) for line in records.read_text().splitlines()]
    assert row["modules"]["exercises/ch11/_tiles.py"] == hashlib.sha256(helper.read_bytes()).hexdigest()


@pytest.mark.parametrize("seconds, outcome", [(1.2, "passed"), (10.0, "failed")])
def test_gates_on_a_tpu_standin_write_measured_rows(fake_course, seconds, outcome):
    fake_course.test_file(GATE_TEST, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": seconds * ADD_FLOOR}))
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--records", str(records))
    result.assert_outcomes(**{outcome: 1})
    rows, rejected = read_judged(records)
    assert not rejected
    measured = [r for r in rows if r.method == "measured"]
    assert len(measured) == 1 and measured[0].chip == "v5e" and measured[0].tree == "exercises"
    assert measured[0].ratio_to_floor == pytest.approx(seconds)
    if outcome == "passed":  # one of gate 00's three slots measured: the gate is not passed
        result.stdout.fnmatch_lines(["  awaiting hardware  The roofline predicts this chip* (1/3 slots measured)",
                                     f"{NONE_PASSED}*"])
    else:
        result.stdout.fnmatch_lines(["*is 10.00x its roofline floor*the band is ?0.95, 1.5?",
                                     "  fail  *The roofline predicts this chip*", f"{NONE_PASSED}*"])


def test_chip_mismatch_on_hardware_is_a_usage_error(fake_course):
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest())
    result = fake_course.run("--gates", "--chip=v6e")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--chip v6e but this run executes on 'TPU v5 lite' (v5e)*"])


def test_a_conftest_cannot_name_the_device(fake_course):
    """The retired device hook would turn a CPU run into measured v5e rows: it is refused."""
    fake_course.test_file(GATE_TEST, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(
        "def pytest_tpucourse_device(config):\n    return ('tpu', 'TPU v5 lite')\n")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*conftest.py defines pytest_tpucourse_device, which is not a hook of "
                                 "pytest-tpucourse: the device gate tests run on is what jax.devices() reports*"])
    assert not records.exists()


def test_a_jax_platform_this_machine_lacks_is_a_usage_error(fake_course, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    result = fake_course.run("--gates")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*JAX could not start its backend*JAX_PLATFORMS=tpu needs a TPU and jax?tpu?*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_registered_chip_is_accepted_by_chip(fake_course):
    (fake_course.pytester.path / "conftest.py").write_text(
        "from pytest_tpucourse.chips import Chip\n"
        "def pytest_tpucourse_register_chips():\n"
        "    return [Chip('mychip', 'tpu', 4e14, 1e12, 32e9)]\n")
    fake_course.test_file("def test_chip(request):\n    assert request.config.getoption('chip') == 'mychip'\n")
    fake_course.run("--chip", "MyChip").assert_outcomes(passed=1)
    assert fake_course.run("--chip", "other").ret == pytest.ExitCode.USAGE_ERROR


def test_a_bad_line_is_reported_and_the_gates_run_goes_on(fake_course):
    fake_course.test_file(GATE_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    records.write_text("{not json\n")
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["gate records: *records.jsonl:1: not a valid row*",
                                 "gate records: 1 bad lines or rejected rows, not counted; see `tpucourse "
                                 "records check`"])
    readout = rec.read(records)
    assert [b.line for b in readout.bad] == [1] and [r.method for r in readout.records] == ["roofline-predicted"]


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
                               roofline.elementwise_cost((n, n), "bfloat16"), jnp.add, lambda seed: (x, x))
"""


def test_gates_under_xdist_write_every_row_once_and_print_one_table(fake_course):
    fake_course.test_file(XDIST_GATE_TESTS, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("-n", "2", "--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=6)
    assert result.stdout.str().count("gates for v5e (pass only on measured rows") == 1
    assert result.stdout.str().count("gates: ") == 1
    rows = rec.read(records).records
    assert sorted(r.test_id for r in rows if r.method == "roofline-predicted") == sorted(
        f"exercises/ch11/test_gate.py::test_add_near_floor[{n}]" for n in (128, 256, 384, 512, 640, 768))
    assert len(rows) == 6
    result.stdout.fnmatch_lines(["  awaiting hardware  *The roofline predicts this chip*", f"{NONE_PASSED}*"])


def test_nothing_is_timed_under_xdist(fake_course):
    """Parallel workers would time each other's load, and pytest-benchmark (the samples' store) is
    off under -n: on an accelerator every gate test fails with the reason and no time is recorded."""
    fake_course.test_file(XDIST_GATE_TESTS, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": 1e-6}))
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("-n", "2", "--gates", "--records", str(records))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines(["*pytest-benchmark, which is disabled (--benchmark-disable, or pytest-xdist's -n)*"])
    assert {r.method for r in rec.read(records).records} == {"roofline-predicted"}
    result.stdout.fnmatch_lines(["  awaiting hardware  *The roofline predicts this chip*", f"{NONE_PASSED}*"])


def test_a_gates_run_lists_no_deselected_exercises(fake_course):
    fake_course.test_file("def test_double(impl):\n    assert impl.double.double(2) == 4\n")
    fake_course.test_file(GATE_TEST, "test_gate.py")
    records = fake_course.pytester.path / "records.jsonl"
    result = fake_course.run("--gates", "--chip=v5e", "--records", str(records))
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=1, deselected=1)
    summary = result.stdout.str().split("= tpucourse =")[1].splitlines()
    assert not [line for line in summary if "double" in line or line.startswith(("  ----", "course: "))]
    result.stdout.fnmatch_lines(["gate 00 The machine (ch10), *s this run", "graded: *", f"{NONE_PASSED}*"])
    # without --gates the summary is unchanged: the exercise is listed
    plain = fake_course.run("--records", str(records))
    plain.stdout.fnmatch_lines(["*double*0/1 tests passed*", "course: 0/15 chapters*"])


def test_an_off_chip_pass_shows_only_for_the_code_it_verified():
    c = gates.gate(1).criterion("correct")
    graded = {"exercises/ch11/matmul.py": "a" * 64}
    row = _correct_row(modules=graded)
    assert judge.criterion_status(c, [row], graded) == "off-chip verified"
    assert judge.criterion_status(c, [row], {"exercises/ch11/matmul.py": "b" * 64}) == "awaiting hardware"
    assert judge.criterion_status(c, [row], {}) == "awaiting hardware"  # the course's rows replayed as yours


def test_a_gates_run_on_an_unwritten_exercise_names_the_function_to_write(fake_course):
    """A gate test calls the learner's kernel: while it is a stub the run is TODO, and the summary
    says which function in which file to write (the `T` alone said nothing)."""
    fake_course.test_file("""
        import pytest

        @pytest.mark.gate(1)
        def test_gate_calls_the_kernel(impl):
            impl.double.double(2)
    """, "test_gate01.py")
    result = fake_course.run("--gates", "--chip=v5e")
    assert result.parseoutcomes().get("todo") == 1
    result.stdout.fnmatch_lines(["graded: exercises/*", "  TODO  double() in exercises/ch11/double.py is not "
                                 "written yet.  [1 test]"])
