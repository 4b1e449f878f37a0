"""The tpucourse command: roofline numbers, the plot extra, the bench page."""

import pytest

from pytest_tpucourse import cli
from pytest_tpucourse.gates import records as rec

from .test_records import MEASURED, make_record


def test_roofline_prints_floor_bound_intensity_ridge(capsys):
    assert cli.main(["roofline", "--chip", "v5e", "--op", "matmul", "--shape", "8x4096x4096",
                     "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    for line in ("floor       41.1 us (memory-bound)", "intensity   8.0 FLOP/byte",
                 "ridge       240.2 FLOP/byte (below it: memory-bound)"):
        assert line in out


@pytest.mark.parametrize("argv, message", [
    (["roofline", "--op", "matmul"], "give --op and --shape together"),
    (["roofline", "--op", "matmul", "--shape", "4x4"], "takes a 3-dimensional shape"),
    (["roofline", "--chip", "v9", "--op", "add", "--shape", "4x4"], "unknown chip 'v9'"),
])
def test_roofline_errors_name_the_problem(capsys, argv, message):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_plot_needs_the_extra_or_draws(capsys, tmp_path):
    png = tmp_path / "r.png"
    code = cli.main(["roofline", "--op", "add", "--shape", "4096x4096", "--plot", str(png),
                     "--records", str(tmp_path / "none.jsonl")])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 2 and "pip install 'pytest-tpucourse[plot]'" in capsys.readouterr().err
    else:
        assert code == 0 and png.stat().st_size > 0


def test_bench_page_marks_predictions_and_keeps_failures(tmp_path):
    path = tmp_path / "records.jsonl"
    rec.append(path, make_record(date="2026-11-01T00:00:00+00:00"))
    rec.append(path, make_record(op="matmul", shapes=[(8, 4096), (4096, 4096)]))
    rec.append(path, make_record(**{**MEASURED, "verdict": "fail"}, value=2e-4, date="2026-11-02T00:00:00+00:00"))
    assert cli.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    assert "| 00 | roofline-predicts | add | 4096×4096 · 4096×4096 | bfloat16 | floor | measured median | 200.0 µs |" in page
    assert "| 00 | roofline-predicts | matmul | 8×4096 · 4096×4096 | bfloat16 | floor | predicted floor | 122.8 µs |" in page
    assert "## Failures (kept forever)" in page and "gate 00 roofline-predicts: add bfloat16 floor, measured" in page
    assert "Gates passed: 0/6" in page


def test_bench_reports_a_corrupt_file(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_text("oops\n")
    assert cli.main(["bench", "--records", str(path)]) == 2
    assert f"{path}:1: not a valid row" in capsys.readouterr().err


def test_bench_page_shows_a_trio_and_a_not_runnable_kernel(tmp_path):
    path = tmp_path / "records.jsonl"
    gpu = dict(MEASURED, platform="gpu", device_kind="NVIDIA H200", chip="h200", gate=3, criterion="beats-xla")
    rec.append(path, make_record(**{**gpu, "verdict": "reference"}, spread=1e-6, ratio_to_floor=1.0))
    rec.append(path, make_record(**{**gpu, "verdict": "not-runnable"}, implementation="kernel", value=None))
    assert cli.main(["bench", "--records", str(path)]) == 0
    page = (tmp_path / "README.md").read_text()
    assert "| 03 | beats-xla | add | 4096×4096 · 4096×4096 | bfloat16 | floor | measured median | 122.8 µs | 1.0 µs | 1.00× |" in page
    assert "| kernel | measured median | not runnable here |" in page
    assert "| 03 The priesthood kernels | Flash attention beats XLA decisively at target shapes | not runnable here |" in page
    png = tmp_path / "h200.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert cli.main(["roofline", "--chip", "h200", "--plot", str(png), "--records", str(path)]) == 0


def test_roofline_says_which_chip_figures_it_used(capsys):
    assert cli.main(["roofline", "--chip", "v5e", "--op", "add", "--shape", "4096x4096"]) == 0
    out = capsys.readouterr().out
    assert ("v5e figures used: peak 1.97e+14 FLOP/s, HBM 8.2e+11 B/s, ridge 240.2 FLOP/byte "
            "(from jax pltpu.get_tpu_info_for_chip (per TensorCore, x cores))") in out


def test_bench_says_what_the_page_was_made_of(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    rec.append(path, make_record(op="matmul", shapes=[(8, 4096), (4096, 4096)]))
    rec.append(path, make_record(**{**MEASURED, "verdict": "fail"}, value=2e-4))
    assert cli.main(["bench", "--records", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'README.md'} from 2 records in {path}" in out
    assert "  v5e: 2 rows (1 roofline-predicted, 1 measured); gates 00; 1 failed, kept on the page" in out
    assert "gates: 0/6 gates passed (measured on hardware only)" in out
