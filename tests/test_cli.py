"""The tpucourse command: roofline numbers, the plot extra, the bench page."""

import pytest

from pytest_tpucourse.commands import main
from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria
from pytest_tpucourse.gates import records as rec

from .gate_helpers import GATES_TOTAL, MEASURED, gate_run, make_record


def test_roofline_prints_floor_bound_intensity_ridge(capsys):
    assert main.main(["roofline", "--chip", "v5e", "--op", "matmul", "--shape", "8x4096x4096",
                     "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    for line in ("floor       41.1 us (memory-bound)", "intensity   8.0 FLOP/byte",
                 "ridge       240.2 FLOP/byte (below it: memory-bound)",
                 "decision    compute-bound from m = 273 rows at k = 4096, n = 4096 (this m = 8: memory-bound)"):
        assert line in out
    assert main.main(["roofline", "--chip", "v5e", "--op", "matmul", "--shape", "8x256x256"]) == 0
    assert "decision    no row count makes it compute-bound: at k = 256, n = 256 the intensity tends to " \
           "2·k·n / (2·(k + n)) = 128.0 FLOP/byte" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["roofline", "--op", "matmul"], "give --op and --shape together"),
    (["roofline", "--op", "matmul", "--shape", "4x4"], "takes a 3-dimensional shape"),
    (["roofline", "--chip", "v9", "--op", "add", "--shape", "4x4"], "unknown chip 'v9'"),
])
def test_roofline_errors_name_the_problem(capsys, argv, message):
    assert main.main(argv) == 2
    assert message in capsys.readouterr().err


def test_plot_needs_the_extra_or_draws(capsys, tmp_path):
    png = tmp_path / "r.png"
    code = main.main(["roofline", "--op", "add", "--shape", "4096x4096", "--plot", str(png),
                     "--records", str(tmp_path / "none.jsonl")])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 2 and "pip install 'pytest-tpucourse[plot]'" in capsys.readouterr().err
    else:
        assert code == 0 and png.stat().st_size > 0


ADD = ("add", [(4096, 4096), (4096, 4096)], "bfloat16")


def _course_rows(tmp_path, **run):
    """A run of the reference solutions writing tmp_path/r.jsonl through the real writer (a fake harness)."""
    return gate_run(tmp_path, tree="solutions", **run)


def test_bench_page_marks_predictions_and_keeps_failures(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    run = _course_rows(tmp_path, gate=0, seconds={"floor": 2e-4})  # add: 1.63x its 122.8 us floor
    run.measure_floor("roofline-predicts", *ADD, roofline.elementwise_cost((4096, 4096), "bfloat16"),
                      lambda x: x, lambda seed: (float(seed),))
    run.predict("roofline-predicts", "matmul", [(8, 4096), (4096, 4096)], "bfloat16",
                roofline.matmul_cost(8, 4096, 4096, "bfloat16"))
    rec.append(path, make_record())  # a row of the learner's tree: never on the course's page
    assert main.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    assert "| 00 | roofline-predicts | add | 4096×4096 · 4096×4096 | bfloat16 | floor | measured median | 200.0 µs |" in page
    assert "| 00 | roofline-predicts | matmul | 8×4096 · 4096×4096 | bfloat16 | floor | predicted floor | 41.1 µs |" in page
    assert "## Failures (kept forever)" in page and "gate 00 roofline-predicts: add bfloat16 floor, measured" in page
    assert f"Gates passed: 0/{GATES_TOTAL}" in page and "from 3 rows of the reference solutions" in capsys.readouterr().out


def test_bench_reports_a_bad_line_and_a_rejected_row_on_the_page(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    forged = make_record(**{**MEASURED, "tree": "solutions", "device_kind": "cpu"}, value=1.3e-4,
                         samples=[1.3e-4] * 12, spread=0.0, ratio_to_floor=1.06)
    path.write_text("oops\n" + forged.to_json() + "\n")
    assert main.main(["bench", "--records", str(path)]) == 0
    assert "2 rows rejected or unreadable (listed on the page)" in capsys.readouterr().out
    page = (tmp_path / "README.md").read_text()
    assert "records.jsonl:1: not a valid row" in page
    assert "records.jsonl:2: rejected measured floor row of gate 00 roofline-predicts (add): device kind 'cpu'" in page
    assert f"Gates passed: 0/{GATES_TOTAL}" in page


def test_a_public_link_is_recorded_as_self_reported(fake_course, monkeypatch, capsys):
    monkeypatch.chdir(fake_course.pytester.path)
    url = "https://github.com/jax-ml/jax/pull/1"
    assert main.main(["records", "link", url]) == 0
    assert "(self-reported)" in capsys.readouterr().out
    [row] = rec.read(fake_course.pytester.path / rec.DEFAULT_PATH).records
    assert (row.gate, row.criterion, row.method, row.value, row.unit) == (5, "upstream", "self-reported", url, "url")
    assert main.main(["records", "link", "not a url"]) == 2
    assert main.main(["records", "link", url, "--criterion", "beats-xla"]) == 2


def test_records_check_against_a_trusted_run(tmp_path, capsys):
    mine, trusted = tmp_path / "mine", tmp_path / "trusted"
    slot = criteria.gate(1).criterion("fused-beats-unfused").slots[0]
    for where, kernel_seconds in ((mine, 7e-5), (trusted, 2e-4)):  # the trusted run fails what mine passed
        run = gate_run(where, gate=1, seconds={"floor": 1e-4, "kernel": kernel_seconds})
        run.measure_trio("fused-beats-unfused", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                         floor=lambda x: x, kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    assert main.main(["records", "check", str(mine / "r.jsonl"), "--against", str(trusted / "r.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "gate 01 fused-beats-unfused matmul_bias_gelu on v5e: contradicted: the trusted run failed it" in out
    assert "1 of 1 passes not reproduced" in out
    # a pass the trusted file reproduces (here: the same file) exits 0
    assert main.main(["records", "check", str(mine / "r.jsonl"), "--against", str(mine / "r.jsonl")]) == 0
    assert "on v5e: reproduced" in capsys.readouterr().out


def test_bench_page_shows_a_trio_and_a_not_runnable_kernel(tmp_path):
    path = tmp_path / "r.jsonl"
    slot = criteria.gate(3).criterion("beats-xla").slots[0]
    run = _course_rows(tmp_path, gate=3, platform="gpu", device_kind="NVIDIA H200", chip="h200",
                       seconds={"floor": 1.228e-4})
    run.measure_trio("beats-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                     floor=lambda x: x, kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    assert main.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    shapes = " · ".join("×".join(map(str, s)) for s in slot.shapes)
    assert f"| 03 | beats-xla | {slot.op} | {shapes} | bfloat16 | floor | measured median | 122.8 µs |" in page
    assert "| kernel | measured median | not runnable here |" in page
    assert "| 03 The priesthood kernels | Flash attention beats XLA decisively at target shapes | project's | " \
           "not runnable here |" in page
    png = tmp_path / "h200.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert main.main(["roofline", "--chip", "h200", "--plot", str(png), "--records", str(path)]) == 0


def test_roofline_says_which_chip_figures_it_used(capsys):
    assert main.main(["roofline", "--chip", "v5e", "--op", "add", "--shape", "4096x4096"]) == 0
    out = capsys.readouterr().out
    assert ("v5e: peak 1.97e+14 FLOP/s (bfloat16), HBM 8.2e+11 B/s, ridge 240.2 FLOP/byte "
            "(from jax pltpu.get_tpu_info_for_chip (per TensorCore, x cores))") in out


REGISTERS_A_CHIP = """
    from pytest_tpucourse.chips import Chip


    def pytest_tpucourse_register_chips():
        return [Chip("mychip", "tpu", peak_flops=4e14, hbm_bandwidth=1.6e12, hbm_bytes=32e9,
                     device_kinds=("TPU my chip",))]
"""


def test_roofline_sees_a_chip_a_conftest_registers(pytester, monkeypatch, capsys):
    """The command knows the chips a pytest run started here would: built in, or registered by a
    plugin or a conftest.py through pytest_tpucourse_register_chips."""
    pytester.makeconftest(REGISTERS_A_CHIP)
    monkeypatch.chdir(pytester.path)
    assert main.main(["roofline", "--chip", "mychip", "--op", "add", "--shape", "4096x4096"]) == 0, \
        capsys.readouterr().err
    out = capsys.readouterr().out
    assert "mychip: peak 4e+14 FLOP/s (bfloat16), HBM 1.6e+12 B/s, ridge 250.0 FLOP/byte" in out, out
    assert main.main(["roofline", "--chip", "yourchip"]) == 2
    assert "unknown chip 'yourchip'; known chips: v2, v3, v4, v5e, v5p, v6e, v7x, a100, a100-40gb, h100, h200, " \
           "mychip" in capsys.readouterr().err


def _first_hardware_rows(tmp_path):
    """Gate 03's predictions for two slots, then the first slot measured on a v5e (timed from the
    device trace), through the real writer: the course's rows of a first run on the chip."""
    from .gate_helpers import FakeHarness

    slots = criteria.gate(3).criterion("beats-xla").slots[:2]
    cpu = _course_rows(tmp_path, gate=3, platform="cpu", device_kind="cpu")
    for slot in slots:
        cpu.measure_trio("beats-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e12, 1e9), floor=lambda x: x,
                         kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    harness = FakeHarness({"floor": 1e-2, "kernel": 7e-3}, method="device-profiler",  # above the 5 ms floor
                          wall={"floor": 1.01e-2, "kernel": 1.2e-2})
    chip = _course_rows(tmp_path, gate=3, harness=harness)
    chip.measure_trio("beats-xla", slots[0].op, slots[0].shapes, slots[0].dtype, roofline.Cost(1e12, 1e9),
                      floor=lambda x: x, kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    return slots


def test_a_measurement_supersedes_its_prediction_on_the_bench_page(tmp_path, capsys):
    slots = _first_hardware_rows(tmp_path)
    path = tmp_path / "r.jsonl"
    assert main.main(["records", "check", str(path)]) == 0  # the first hardware rows are accepted
    assert "4 rows accepted, 0 rejected, 0 unreadable lines" in capsys.readouterr().out
    assert main.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    measured, predicted = (f"| 03 | beats-xla | {s.op} | {' · '.join('×'.join(map(str, d)) for d in s.shapes)} | "
                           f"bfloat16 |" for s in slots)
    lines = page.splitlines()
    first = [line for line in lines if line.startswith(measured)]
    assert [line.split(" | ")[5:7] for line in first] == [["floor", "measured median"], ["kernel", "measured median"]]
    for line in first:  # the prediction is folded into the measured lines, not listed beside them
        cells = line.split(" | ")
        assert cells[16] == "5076.1 µs" and cells[18] == "TPU v5 lite"
    assert [line.split(" | ")[10] for line in first] == ["device-profiler", "device-profiler, dispatch-bound"]
    assert "| 0.70× |" in first[1]
    second = [line for line in lines if line.startswith(predicted)]
    assert [line.split(" | ")[5:7] for line in second] == [["floor", "predicted floor"]]  # not measured yet


def test_a_row_written_before_rows_said_how_they_were_timed_shows_it_was_assumed(tmp_path):
    import json

    path = tmp_path / "r.jsonl"
    run = _course_rows(tmp_path, gate=0, seconds={"floor": 2e-4})
    run.measure_floor("roofline-predicts", *ADD, roofline.elementwise_cost((4096, 4096), "bfloat16"),
                      lambda x: x, lambda seed: (float(seed),))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:  # as rows were written before they said how they were timed
        row["schema_version"] = 2
        for name in ("timed_by", "wall_per_call", "dispatch_bound", *rec.SAMPLING_FIELDS):
            del row[name]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    assert "| floor | measured median | 200.0 µs |" in page
    assert "| wall-calls (assumed: the row predates timed_by) |" in page
    assert "## Rejected rows" not in page


def test_the_site_shows_a_measurement_in_place_of_its_prediction_and_every_failure(tmp_path):
    from pytest_tpucourse.site import bench

    slots = _first_hardware_rows(tmp_path)
    rows = rec.read(tmp_path / "r.jsonl").records
    lines = [dict(zip(bench.COLUMNS, line)) for line in bench.record_rows(rows)]
    first = [line for line in lines if line["op"] == slots[0].op and line["shapes"].startswith("2×16")]
    predicted = "5076.1 µs (roofline-predicted)"
    assert [(line["implementation"], line["what"], line["timed by"], line["predicted floor"]) for line in first] == [
        ("floor", "measured median", "device-profiler", predicted),
        ("kernel", "measured median", "device-profiler, dispatch-bound", predicted)]
    assert all(line["device kind"] == "TPU v5 lite" for line in first)
    failed = make_record(**{**MEASURED, "verdict": "fail"}, samples=[2e-4] * 12, spread=0.0, value=2e-4)
    assert bench.failure_lines([failed, make_record()]) == [
        f"{failed.date[:10]} v5e gate 00 roofline-predicts: add bfloat16 floor, measured median (t)"]


def test_records_check_finds_a_row_whose_commit_holds_other_code(tmp_path, capsys, monkeypatch):
    import hashlib
    import subprocess

    from .support import REPO

    monkeypatch.chdir(REPO)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    module = "solutions/ch11/matmul.py"
    at_head = subprocess.run(["git", "show", f"{head}:{module}"], cwd=REPO, capture_output=True).stdout
    path = tmp_path / "r.jsonl"
    for digest in (hashlib.sha256(at_head).hexdigest(), "0" * 64):
        rec.append(path, make_record(tree="solutions", git_commit=head, git_dirty=False, modules={module: digest}))
    assert main.main(["records", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.count("commit check:") == 1
    assert "commit check: gate 00 roofline-predicts add floor" in out
    assert f"{module} at {head[:10]} is other code than the row's hash names" in out
    unknown = tmp_path / "unknown.jsonl"  # a commit this clone does not have: said, not failed
    rec.append(unknown, make_record(tree="solutions", git_commit="f" * 40, git_dirty=False, modules={module: "0"}))
    assert main.main(["records", "check", str(unknown)]) == 0
    assert "commits this repository does not have, so their rows' code is not checked: ffffffffff" in \
        capsys.readouterr().out
