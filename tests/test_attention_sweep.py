"""bench/attention_sweep.py off the chip: its dry run takes every path of the sweep (compile,
check against XLA, time, table, JSON) on tiny shapes under TPU interpret mode, and without
--dry-run it refuses a machine that is not a TPU rather than time one."""

import importlib.util
import json
import subprocess
import sys

import pytest

from .support import REPO

SCRIPT = REPO / "bench" / "attention_sweep.py"


def _sweep_module():
    spec = importlib.util.spec_from_file_location("attention_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["attention_sweep"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.runs
def test_dry_run_times_every_kernel_and_writes_json(tmp_path):
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["dry_run"] is True
    records = result["records"]
    assert {(r["suite"], r["impl"]) for r in records} == {
        ("ch13", "xla"), ("ch13", "jax-flash"), ("ch13", "ours"),
        ("ch15", "xla"), ("ch15", "splash"), ("ch15", "capstone")}
    assert {r["step"] for r in records} == {"fwd", "fwd+bwd"}
    for r in records:
        assert r["status"] == "ok", r
        assert r["checked_against"] == "xla" and r["rel_error"] < _sweep_module().MAX_ERROR, r
        assert r["n"] == 1 and len(r["samples_ms"]) == 1, r
    assert "ch13 1x1x128x128 causal fwd+bwd" in run.stdout


def test_refuses_to_time_anything_but_a_tpu(capsys):
    sweep = _sweep_module()
    import jax

    if jax.devices()[0].platform == "tpu":
        pytest.skip("this machine has a TPU")
    with pytest.raises(SystemExit, match="times kernels on a TPU"):
        sweep.main([])
