"""bench/device_gate00.sh, the one script that measures gate 00 on a machine with a GPU: it parses,
its dry run names the commands it would run, and its rehearsal runs gate 00 through on a CPU."""

import os
import subprocess
import sys

import pytest

from .support import REPO

SCRIPT = REPO / "bench" / "device_gate00.sh"


def _script(tmp_path, **env):
    return subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "HOME": str(tmp_path), "OUT": str(tmp_path / "out"),
                               # the script's python3 is this test's, activated or not
                               "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
                               **env})


def test_the_script_parses_and_its_dry_run_installs_without_an_index_and_runs_gate_00(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    run = _script(tmp_path, DRY_RUN="1")
    assert run.returncode == 0, run.stderr
    assert "pip install --no-deps --no-build-isolation --no-index --ignore-requires-python -q -e ." in run.stdout
    assert "exercises/ch10/test_gate00.py --gates --solutions" in run.stdout
    assert f"--records {tmp_path / 'out' / 'gate00.records.jsonl'}" in run.stdout
    assert not (tmp_path / "out" / "gate00.records.jsonl").exists()
    assert "No GPU was available" in SCRIPT.read_text()


@pytest.mark.runs
def test_the_scripts_rehearsal_runs_gate_00_through_on_a_cpu(tmp_path):
    run = _script(tmp_path, REHEARSE="1", CHIP="h200")
    log = (tmp_path / "out" / "gate00.log").read_text()
    assert run.returncode == 0, log[-3000:]
    assert "rehearsal: 3/3 gate tests ran through" in log
    assert not (tmp_path / "out" / "gate00.records.jsonl").exists()
