"""A gate run's progress and time: a line as each gate finishes, each gate's time in the closing table,
and the `gates` line a run of the course's solutions on an accelerator adds to bench/device_runs.jsonl
(gates/device_runs.py, run/gate_progress.py).

The accelerator is a stand-in (tests/gate_helpers.py): the run sees a TPU and the harness returns
chosen times. It shows what the run prints and writes, never a number about a chip.
"""

import json
import re

import pytest

from pytest_tpucourse.gates import device_runs
from pytest_tpucourse.gates.report import duration

from .gate_helpers import ADD_FLOOR, standin_conftest

TWO_GATES = """
    import pytest
    from pytest_tpucourse import roofline

    @pytest.mark.gate(0)
    @pytest.mark.parametrize("n", [128, 256])
    def test_add_near_floor(gate_run, n):
        import jax.numpy as jnp
        x = jnp.ones((4096, 4096), jnp.bfloat16)
        gate_run.measure_floor("roofline-predicts", "add", [(4096, 4096), (4096, 4096)], "bfloat16",
                               roofline.elementwise_cost((4096, 4096), "bfloat16"), jnp.add, lambda seed: (x, x))

    @pytest.mark.gate(2)
    def test_ir(gate_run):
        gate_run.verify("ir-mapped", "mlp_block", [(256, 512), (512, 256), (1, 256)], "bfloat16", check=lambda: None)
"""

LINE = dict(date="2026-12-05T10:00:00+00:00", device_kind="TPU v5 lite", jax="0.10.2", libtpu="0.0.42.1",
            commit="a" * 40, kind="gates", seconds=131.5,
            chapters={"ch13": {"passed": 10, "failed": 0, "skipped": 0, "seconds": 120.25}})


def test_a_gate_run_on_the_chip_says_each_gate_as_it_ends_its_time_and_adds_its_device_run_line(fake_course):
    fake_course.test_file(TWO_GATES, "test_gate.py")
    (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": 1.2 * ADD_FLOOR}))
    result = fake_course.run("--gates", "--solutions")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["gate 00: 2 tests, 2 slots timed, *s", "gate 02: 1 test, nothing timed, *s"])
    assert out.index("gate 00: 2 tests") < out.index("gate 02: 1 test")
    result.stdout.fnmatch_lines(["gate 00 The machine (ch10), *s this run", "gate 01 Pallas fundamentals (ch11)",
                                 "gate 02 The IR stack (ch12), *s this run",
                                 "tpucourse: this gate run's line added to bench/device_runs.jsonl (*s on TPU v5 lite)"])
    runs, bad = device_runs.read(fake_course.pytester.path / device_runs.PATH)
    assert not bad
    [run] = runs
    assert (run.kind, run.device_kind, run.commit) == ("gates", "TPU v5 lite", None)  # no git here
    assert {c: (n["passed"], n["failed"], n["skipped"]) for c, n in run.chapters.items()} == {
        "ch10": (2, 0, 0), "ch12": (1, 0, 0)}
    assert run.seconds >= sum(n["seconds"] for n in run.chapters.values())


@pytest.mark.parametrize("args", [("--gates", "--chip=v5e", "--solutions"), ("--gates", "--rehearse", "--solutions"),
                                  ("--gates",)], ids=["cpu", "rehearsal", "exercises-on-chip"])
def test_only_a_run_of_the_solutions_on_the_chip_adds_a_device_run_line(fake_course, args):
    fake_course.test_file(TWO_GATES, "test_gate.py")
    if args == ("--gates",):
        (fake_course.pytester.path / "conftest.py").write_text(standin_conftest({"floor": 1.2 * ADD_FLOOR}))
    result = fake_course.run(*args)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["gate 00: 2 tests, *", "gate 02: 1 test, *"])  # a rehearsal's progress too
    assert not (fake_course.pytester.path / device_runs.PATH).exists()
    assert "device_runs.jsonl" not in result.stdout.str()


def test_a_device_run_line_is_validated_and_appended_whole(tmp_path):
    path = tmp_path / "device_runs.jsonl"
    device_runs.append(path, device_runs.DeviceRun(**LINE))
    device_runs.append(path, device_runs.DeviceRun(**{**LINE, "kind": "solutions", "commit": "b" * 40 + "-dirty",
                                                      "libtpu": None}))
    runs, bad = device_runs.read(path)
    assert not bad and [r.kind for r in runs] == ["gates", "solutions"]
    assert json.loads(path.read_text().splitlines()[0]) == LINE
    assert device_runs.commit_label("c" * 40, True) == "c" * 40 + "-dirty"
    assert device_runs.commit_label(None, None) is None


@pytest.mark.parametrize("change, why", [
    (dict(commit="abc"), "commit is a 40-digit sha"),
    (dict(kind="Gates!"), "kind is one of solutions, stubs, honest, gates"),
    (dict(seconds=-1), "seconds is a number of seconds"),
    (dict(date="yesterday"), "date is an ISO 8601 date and time"),
    (dict(chapters={"13": {}}), "'13' is not a chapter"),
    (dict(chapters={"ch13": {"passed": 1}}), "ch13 is {passed, failed, skipped: counts, seconds}"),
    (dict(chapters={"ch13": {"passed": True, "failed": 0, "skipped": 0, "seconds": 1.0}}), "ch13 is"),
    (dict(device_kind=""), "device_kind is a non-empty string"),
    (dict(host="tpu-vm-1"), "unknown fields ['host']"),
])
def test_a_bad_device_run_line_is_refused_when_written_and_reported_when_read(tmp_path, change, why):
    line = {**LINE, **change}
    with pytest.raises(ValueError, match=re.escape(why)):
        device_runs.DeviceRun.from_dict(line)
    path = tmp_path / "device_runs.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(LINE) + "\n" + "{torn")
    runs, bad = device_runs.read(path)
    assert len(runs) == 1
    assert [b.line for b in bad] == [1, 3] and why in bad[0].reason
    assert "a write was cut short" in bad[1].reason


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (4.4, 59.6, 131, 3720)] == ["4s", "1m00s", "2m11s", "1h02m"]
