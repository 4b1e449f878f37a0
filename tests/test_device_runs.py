"""bench/device_runs.jsonl and bench/device_runs.py: the course's runs on a chip, one checked line each."""

import json
import subprocess
import sys

import pytest

from pytest_tpucourse.gates import device_runs

from .support import REPO

sys.path.insert(0, str(REPO / "bench"))
import device_runs as script  # noqa: E402  (bench/device_runs.py)


SHA = "70bc5812ab" * 4


def _line(**changes):
    entry = {"date": "2026-12-05T23:00:00+00:00", "device_kind": "TPU v5 lite", "jax": "0.10.2",
             "libtpu": "0.0.42.1", "commit": SHA, "kind": "solutions", "seconds": 12.5,
             "chapters": {"ch11": {"passed": 49, "failed": 0, "skipped": 0, "seconds": 10.0}}}
    return {**entry, **changes}


def test_a_line_is_checked_when_written_and_when_read(tmp_path):
    path = tmp_path / "runs.jsonl"
    device_runs.append(path, device_runs.DeviceRun(**_line()))
    stubs = _line(kind="stubs", chapters={"ch11": {"passed": 0, "failed": 49, "skipped": 0, "seconds": 3.0,
                                                   "not_todo": 1}})
    device_runs.append(path, device_runs.DeviceRun(**stubs))
    device_runs.append(path, device_runs.DeviceRun(**_line(kind="honest", variant="own")))
    for bad, why in ((_line(kind="nightly"), "kind is one of"), (_line(commit="HEAD"), "40-digit sha"),
                     (_line(kind="stubs"), "not_todo"), (_line(kind="honest"), "names its variant set"),
                     (_line(variant="own"), "only an honest run")):
        with pytest.raises(ValueError, match=why):
            device_runs.DeviceRun(**bad)
    with open(path, "a") as file:
        file.write("{not json\n" + json.dumps(_line(date="yesterday")) + "\n")
    runs, bad = device_runs.read(path)
    assert [r.kind for r in runs] == ["solutions", "stubs", "honest"] and len(bad) == 2
    table = "\n".join(device_runs.table_lines(runs))
    assert "| solutions | 2026-12-05 |" in table and "49/0/0" in table and "0/49/0 (1 not TODO)" in table
    assert "| honest (own) |" in table


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="exercises.ch11.test_matmul" name="test_a" time="1.5"/>
<testcase classname="exercises.ch11.test_matmul" name="test_b" time="0.5">
  <failure message="matmul() in exercises/ch11/matmul.py is not written yet.">...</failure></testcase>
<testcase classname="exercises.ch11.test_matmul" name="test_c" time="0.5">
  <failure message="AssertionError: wrong">...</failure></testcase>
<testcase classname="exercises.ch14.test_permute" name="test_d" time="2"><skipped message="needs 8"/></testcase>
<testcase classname="tests.test_other" name="test_e" time="2"/>
</testsuite></testsuites>"""


def test_chapter_counts_come_from_the_junit_file_and_stubs_count_what_is_not_todo(tmp_path):
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    assert script.chapter_counts(junit, stubs=True) == {
        "ch11": {"passed": 1, "failed": 2, "skipped": 0, "seconds": 2.5, "not_todo": 1},
        "ch14": {"passed": 0, "failed": 0, "skipped": 1, "seconds": 2.0, "not_todo": 0}}
    assert "not_todo" not in script.chapter_counts(junit)["ch11"]
    assert script.chapter_counts(tmp_path / "missing.xml") == {}


def test_the_dry_run_names_every_run():
    run = subprocess.run([sys.executable, str(REPO / "bench" / "device_runs.py"), "--dry-run", "--commit", SHA],
                         capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "exercises --solutions" in out and "exercises --gates --solutions --chip=v5e" in out
    assert f"--device-runs={REPO / 'bench' / 'device_runs.jsonl'}" in out
    assert out.count("(in ") == len(script.honest_variants()) >= 2


def test_an_honest_run_runs_the_exercises_its_corpus_holds_and_nothing_else(tmp_path):
    """Chapter 15's corpus holds its kernels, band.py, manifest.py and capstone.toml, not a write-up:
    its run collects those exercises' tests but the WRITEUP.md test (the course's stub would fail it)."""
    from types import SimpleNamespace

    [(name, command, course)] = [run for run in script._runs("honest", SimpleNamespace(chapters=["ch15"],
                                                                                        dry_run=False), tmp_path)
                                 if run[0] == "honest-own"]
    held = {path.stem for path in (REPO / "tests" / "honest" / "ch15" / "own").glob("*.py")}
    collected = subprocess.run([*command, "--collect-only"], cwd=course, capture_output=True, text=True,
                               timeout=600)
    tests = [line for line in collected.stdout.splitlines() if "::" in line]
    assert tests and collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert {line.split("::")[0] for line in tests} == {f"exercises/ch15/test_{stem}.py" for stem in held}
    assert not [line for line in tests if "writeup" in line]
    assert (course / "shipped.json").read_bytes() == (REPO / "shipped.json").read_bytes()


def test_docs_tpu_shows_the_latest_runs_of_the_file():
    runs, bad = device_runs.read(REPO / device_runs.PATH)
    assert bad == []
    text = (REPO / device_runs.DOCS).read_text(encoding="utf-8")
    assert device_runs.docs_with_table(text, runs) == text, "python bench/device_runs.py writes docs/tpu.md's table"


def test_a_commit_the_local_git_does_not_hold_is_taken_as_stated(capsys):
    script._check_commit("f" * 40)  # a copy sent with a .git older than its files: nothing to check, no refusal
    assert "does not hold ffffffffff" in capsys.readouterr().err


def _run(**changes):
    return device_runs.DeviceRun(**_line(**changes))


def _chapter(passed, seconds=1.0):
    return {"passed": passed, "failed": 0, "skipped": 0, "seconds": seconds}


def test_the_table_takes_each_chapter_from_the_latest_line_that_ran_it():
    whole = _run(chapters={"ch11": _chapter(40), "ch13": _chapter(30)}, commit="a" * 40)
    ch11 = _run(date="2026-12-07T01:00:00+00:00", chapters={"ch11": _chapter(49)}, commit="b" * 40)
    lines = device_runs.table_lines([whole, ch11])
    rows = [line for line in lines if line.startswith("| solutions")]
    assert len(rows) == 2  # the whole run still holds ch13; the slice holds ch11
    assert "aaaaaaaaaa" in rows[0] and rows[0].endswith("|  | 30/0/0 |")  # ch11's cell left to the slice
    assert "bbbbbbbbbb" in rows[1] and rows[1].endswith("| 49/0/0 |  |")
    again = _run(date="2026-12-08T01:00:00+00:00", chapters={"ch11": _chapter(49), "ch13": _chapter(31)})
    assert [r for r in device_runs.table_lines([whole, ch11, again]) if r.startswith("| solutions")] == \
        [r for r in device_runs.table_lines([again]) if r.startswith("| solutions")]  # a whole run replaces both
    empty = _run(kind="gates", chapters={}, stopped="interrupted")
    assert any(r.startswith("| gates, interrupted |") for r in device_runs.table_lines([whole, empty]))
    later = _run(kind="gates", chapters={"ch13": _chapter(3)})
    assert sum(r.startswith("| gates") for r in device_runs.table_lines([whole, empty, later])) == 1


def test_a_line_says_why_a_run_stopped_early_and_only_in_words():
    line = _run(stopped="interrupted at the 480 s budget")
    assert json.loads(line.to_json())["stopped"] == "interrupted at the 480 s budget"
    assert "stopped" not in json.loads(_run().to_json())
    for bad in ("", 3):
        with pytest.raises(ValueError, match="stopped says why"):
            _run(stopped=bad)


def test_a_slice_runs_only_its_chapters():
    run = subprocess.run([sys.executable, str(REPO / "bench" / "device_runs.py"), "--dry-run", "--commit", SHA,
                          "--chapters", "ch11", "ch13"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    commands = [line for line in run.stdout.splitlines() if line.startswith("+ ")]
    assert all("exercises/ch11 exercises/ch13" in c or "(in " in c for c in commands)
    assert not any(" exercises " in f"{c} " for c in commands)
    assert len([c for c in commands if "(in " in c]) == len(script.honest_variants(["ch11", "ch13"])) >= 1
    assert len(script.honest_variants(["ch11"])) <= len(script.honest_variants())
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "device_runs.py"), "--dry-run", "--chapters", "ch99"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no exercises/ folder for ch99" in bad.stderr


def test_a_run_past_its_budget_is_interrupted_as_ctrl_c_would_and_said_so(tmp_path):
    code = ("import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n"
            "    open('finished', 'w').write('session finished')\n    raise SystemExit(2)\n")
    exit_code, stopped = script.run_within([sys.executable, "-c", code], 1.0, cwd=tmp_path)
    assert (exit_code, stopped) == (2, True)
    assert (tmp_path / "finished").read_text() == "session finished"  # it had its say before it ended
    assert script.run_within([sys.executable, "-c", "pass"], 30.0, cwd=tmp_path) == (0, False)


def _gate_progress(root, exitstatus):
    """The gate progress of a native `--solutions` gate run in the course at `root` that ran gate 03."""
    from types import SimpleNamespace

    from pytest_tpucourse.run.gate_progress import GateProgress, GateTally

    session = SimpleNamespace(
        gates=SimpleNamespace(on_accelerator=True, rehearsal=None, interpret_requested=False,
                              device_kind="TPU v5 lite"),
        options=SimpleNamespace(solutions=True, device_runs=None), course=SimpleNamespace(root=root),
        backend=SimpleNamespace(jax_version="0.10.2"), exitstatus=int(exitstatus))
    progress = GateProgress(session, config=None)
    tally = GateTally(tests={"a"}, outcomes={"a": "passed"}, seconds=2.0)
    progress.gates, progress.chapters = {3: tally}, {"ch13": tally}
    return progress


def test_an_interrupted_gate_run_says_so_in_its_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUCOURSE_GIT_COMMIT", SHA)
    progress = _gate_progress(tmp_path, pytest.ExitCode.INTERRUPTED)
    assert progress.device_run().stopped == "interrupted"
    progress.session.exitstatus = int(pytest.ExitCode.OK)
    assert progress.device_run().stopped is None


def test_a_gate_runs_line_names_the_stated_commit_where_the_copys_git_is_older_than_its_files(tmp_path, monkeypatch):
    """A tree sent to a chip with the .git it started from (HEAD an older commit, the files changed
    since) cannot name its commit itself: the gate run's line takes TPUCOURSE_GIT_COMMIT's, as the
    gate rows do (gates/provenance.py), not the old HEAD marked dirty."""
    (tmp_path / "kernel.py").write_text("v = 1\n")
    for command in (["init", "-q"], ["add", "kernel.py"],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "old"]):
        subprocess.run(["git", *command], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "kernel.py").write_text("v = 2\n")  # the files of a newer commit
    monkeypatch.setenv("TPUCOURSE_GIT_COMMIT", SHA)
    progress = _gate_progress(tmp_path, pytest.ExitCode.OK)
    assert progress.device_run().commit == SHA
    monkeypatch.delenv("TPUCOURSE_GIT_COMMIT")  # nothing stated: git's own answer, marked dirty
    assert progress.device_run().commit.endswith("-dirty") and not progress.device_run().commit.startswith(SHA)
