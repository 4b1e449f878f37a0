"""The chapters' own gate tests, run as a learner runs them: with --gates on a CPU, and rehearsed.

A gate test whose measuring path breaks (a call not updated when the API changed) would show on
a TPU, in a paid hour; here every gate test of the six gates runs its whole path on the CPU: as
predictions with `--gates`, and as on the chip with `--gates --rehearse` (a stand-in clock).
To stay cheap, the rehearsal runs each gate test function at one target shape for each kind
(forward and backward, causal or not) and leaves the correctness tests of gates 03-05 (the same
path with or without a rehearsal) to the plain run; the two trees whose gate kernels are not the
learner's own run one correctness test each.
"""

import json
import subprocess
import sys

import pytest

from pytest_tpucourse.gates import criteria

from .support import REPO

pytestmark = pytest.mark.runs

# every gate test function, one parametrization of each code path where a test has several
REHEARSED = ("not (flash_attention_speed and 1x8x8192) and not target1 and not test_flash_attention_is_correct "
             "and not test_collectives_are_correct and not test_capstone_is_correct")


def _pytest(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(REPO),
                           f"--basetemp={tmp_path / 'basetemp'}", *args], cwd=REPO, capture_output=True,
                          text=True, env={**__import__("os").environ, "HOME": str(tmp_path), "PY_COLORS": "0"})


def test_every_gate_test_predicts_on_a_cpu(tmp_path):
    records = tmp_path / "records.jsonl"
    run = _pytest(tmp_path, "exercises", "--gates", "--chip=v5e", "--solutions", "--records", str(records))
    assert run.returncode == 0, run.stdout[-3000:]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert {r["gate"] for r in rows} == set(criteria.GATE_NUMBERS)
    assert {r["method"] for r in rows} == {"roofline-predicted", "off-chip-verified"}
    assert {(r["gate"], r["verdict"]) for r in rows if r["method"] == "off-chip-verified"} == {
        (g.number, "pass") for g in criteria.GATES if any(c.kind == "correctness" for c in g.criteria)
    }  # every correctness criterion, the own-work check included


def test_every_gate_test_runs_through_a_rehearsal(tmp_path):
    run = _pytest(tmp_path, "exercises", "--gates", "--rehearse", "--chip=v5e", "--solutions", "-k", REHEARSED)
    out = run.stdout
    assert run.returncode == 0, out[-4000:]
    summary = out.split("tpucourse rehearsal")[1]
    ran = [line for line in summary.splitlines() if line.startswith("  ran through  ")]
    files = {line.split()[2].split("::")[0] for line in ran}
    assert files == {g.test_file() for g in criteria.GATES}
    assert "ERROR" not in summary and "0 rejected, 0 unreadable" in summary
    assert f"rehearsal: {len(ran)}/{len(ran)} gate tests ran through" in summary
    assert "shapes scaled for the CPU: 2x16x4096x128 -> 1x1x128x128" in summary
    path = summary.split("rehearsal rows: ")[1].split(" written to ")[1].split(" (")[0]
    assert path.endswith(".rehearsal.jsonl") and not path.startswith(str(REPO))


CH13_PUBLIC = '''"""flash attention by calling JAX's shipped kernel (the gate's ceiling)."""
from pytest_tpucourse import public_kernels


def {name}(q, k, v, *, causal=False, scale=None, block_q=128, block_kv=128):
    return public_kernels.{name}(q, k, v, causal=causal, scale=scale, block_q=block_q, block_kv=block_kv)
'''

CH11_DOT_AND_COPY = '''"""XLA's matmul, with an 8x128 Pallas copy pasted on."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def matmul(x, y, *, bm=128, bk=128, bn=128):
    out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype)
    head = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct((8, 128), out.dtype))(out[:8, :128])
    return out.at[:8, :128].set(head)
'''


def _tree(tmp_path, chapter, replaced: dict):
    tree = tmp_path / "tree"
    (tree / chapter).mkdir(parents=True)
    for module in (REPO / "solutions" / chapter).glob("*.py"):
        (tree / chapter / module.name).write_text(replaced.get(module.stem, module.read_text()))
    return tree


@pytest.mark.parametrize("chapter, test, replaced, why", [
    ("ch13", "test_gate03.py::test_flash_attention_is_correct[non-causal]",
     {"forward": CH13_PUBLIC.format(name="flash_forward"), "backward": CH13_PUBLIC.format(name="flash_attention")},
     "runs Pallas kernels defined outside the graded tree"),
    ("ch11", "test_gate01.py::test_kernels_are_correct", {"matmul": CH11_DOT_AND_COPY},
     "FLOPs in dot_general/convolution outside its Pallas kernels"),
], ids=["ch13-public-kernels", "ch11-xla-dot-and-a-copy"])
def test_a_gate_kernel_not_the_learners_own_gets_a_fail_row(tmp_path, chapter, test, replaced, why):
    records = tmp_path / "records.jsonl"
    tree = _tree(tmp_path, chapter, replaced)
    run = _pytest(tmp_path, f"exercises/{chapter}/{test}", "--gates", "--chip=v5e", "--impl-root", str(tree),
                  "--records", str(records))
    assert run.returncode == 1, run.stdout[-3000:]
    [row] = [json.loads(line) for line in records.read_text().splitlines()]
    assert (row["criterion"], row["verdict"], row["statistic"]) == ("correct", "fail", "own-work")
    assert "not your own kernel doing the op" in row["notes"] and why in row["notes"]
    assert why in run.stdout
    assert "fail               Correct under the differential suite" in run.stdout


ONE_CHIP = '''
"""A stand-in TPU machine with one chip, for tests/test_chapter_gates.py: the run sees one TPU v5 lite;
the gate tests build their CPU shapes (the chip is a CPU), and the harness returns chosen times."""
from pytest_tpucourse.gates import run, timer
from pytest_tpucourse.grading import backend

backend.device_facts = lambda: backend.DeviceFacts("tpu", "TPU v5 lite", 1)
run.GateRun.shapes = lambda self, timed, *, cpu: cpu


def _measure(self, fns, input_sets):
    for fn in fns.values():
        for args in input_sets:
            fn(*args)
    return {name: timer.Timing(tuple(1e-4 * (1 + 0.002 * i) for i in range(12)), 1, 0.0, 1e-9, "interval")
            for name in fns}


timer.Harness.measure = _measure
'''


def test_gate_04_on_one_chip_measures_its_compute_alone_and_checks_the_rest_off_chip(tmp_path):
    """Gate 04's own tests on a machine with one chip (a stand-in): the collectives checked on 4 CPU
    devices (off-chip verified), the compute alone timed on the chip, the collective matmul not runnable."""
    (tmp_path / "one_chip.py").write_text(ONE_CHIP)
    records = tmp_path / "records.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "one_chip", "--rootdir",
                          str(REPO), f"--basetemp={tmp_path / 'basetemp'}", "exercises/ch14/test_gate04.py",
                          "--gates", "--solutions", "--records", str(records), "--device-runs",
                          str(tmp_path / "device_runs.jsonl"), "-rs"], cwd=REPO, capture_output=True,
                         text=True, env={**__import__("os").environ, "HOME": str(tmp_path), "PY_COLORS": "0",
                                         "PYTHONPATH": str(tmp_path)})
    out = run.stdout
    assert run.returncode == 0, out[-4000:]
    assert "1 passed, 1 skipped" in out
    assert "gate 04: 2 tests, 1 slot timed, 1 skipped, " in out
    assert "not runnable on one chip (needs 4 chips): compute alone measured, 101.1 us on one v5e chip; the " \
           "collective all-gather-matmul is timed on 4 chips" in out
    assert "  not runnable on one chip (needs 4 chips): compute alone measured, communication off-chip verified" in out
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    [correct] = [r for r in rows if r["criterion"] == "correct"]
    assert (correct["method"], correct["verdict"]) == ("off-chip-verified", "pass")
    assert correct["notes"].startswith("needs 4 chips; this run has 1 TPU v5 lite: checked on 4 CPU devices")
    measured = {r["implementation"]: r for r in rows if r["method"] == "measured"}
    assert (measured["compute-alone"]["verdict"], measured["kernel"]["verdict"]) == ("reference", "not-runnable")
    [line] = (tmp_path / "device_runs.jsonl").read_text().splitlines()
    assert json.loads(line)["chapters"] == {"ch14": {"passed": 1, "failed": 0, "skipped": 1,
                                                     "seconds": json.loads(line)["chapters"]["ch14"]["seconds"]}}
