"""Gate records: the honesty rule in the constructor, atomic appends, bad lines reported and repaired."""

import json
import signal
import subprocess
import sys
import time

import pytest

from pytest_tpucourse.gates import criteria
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.records import HonestyError

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import judge

from .gate_helpers import GATES_TOTAL, MEASURED, FakeHarness, gate_run, make_record, read_judged
from .support import DEFAULT_SIGINT, REPO


def test_measured_rows_need_native_hardware():
    make_record(**MEASURED, samples=[1e-4] * 12, spread=0.0)
    with pytest.raises(HonestyError, match="a cpu run cannot write a measured row"):
        make_record(**{**MEASURED, "platform": "cpu", "device_kind": "cpu"})
    with pytest.raises(HonestyError, match="an interpret-mode run cannot write a measured row"):
        make_record(**MEASURED, interpret=True)


def test_predictions_never_pass_and_off_chip_rows_carry_no_time():
    with pytest.raises(HonestyError, match="a roofline prediction cannot pass"):
        make_record(verdict="pass")
    with pytest.raises(HonestyError, match="an off-chip run cannot record a time"):
        make_record(method="off-chip-verified", verdict="pass", interpret=True)
    with pytest.raises(ValueError, match="only predictions are pending"):
        make_record(method="off-chip-verified", unit="check")
    with pytest.raises(HonestyError, match="only a measured row carries timing samples"):
        make_record(samples=[1e-4] * 12)


@pytest.mark.parametrize("kw, message", [
    (dict(method="guessed"), "method must be one of"), (dict(verdict="ok"), "verdict must be one of"),
    (dict(implementation="mine"), "implementation must be one of"), (dict(gate=GATES_TOTAL), f"gate must be 0-{GATES_TOTAL - 1}"),
    (dict(value=float("nan")), "value must be a finite number"), (dict(tree="mine"), "tree must be"),
    (dict(interpret="no"), "interpret has the wrong type"), (dict(modules=["a"]), "modules has the wrong type"),
    (dict(cost={"flops": 1}), "cost is"), (dict(ratio_ci=[1.0]), "ratio_ci is a"),
])
def test_bad_fields_are_rejected(kw, message):
    with pytest.raises(ValueError, match=message):
        make_record(**kw)


def test_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    row = make_record(cost={"flops": 1.0, "bytes": 2.0}, modules={"exercises/ch11/matmul.py": "ab"})
    rec.append(path, row)
    assert rec.read(path).records == [row]
    assert rec.read(path).rows[0].where == f"{path}:1"


def test_a_public_link_is_self_reported_and_never_a_speed():
    row = rec.link_record("https://github.com/jax-ml/jax/pull/1", gate=5, criterion="upstream", chapter="ch15")
    assert (row.method, row.statistic, row.unit, row.value) == (
        "self-reported", "public-link", "url", "https://github.com/jax-ml/jax/pull/1")
    for bad in ("http://example.com", "github.com/x", "https://", "https://a b", 3.0):
        with pytest.raises(ValueError, match="a public link is an https:// URL"):
            rec.link_record(bad, gate=5, criterion="upstream", chapter="ch15")
    with pytest.raises(ValueError, match="a self-reported row is a public link"):
        make_record(method="self-reported", verdict="pass", value="https://x.org")


def test_schema_documents_every_field():
    schema = json.loads((REPO / "docs" / "records-schema.json").read_text())
    fields = set(json.loads(make_record().to_json()))
    assert set(schema["properties"]) == fields
    assert set(schema["required"]) <= fields
    assert schema["properties"]["schema_version"]["enum"] == list(rec.READABLE_VERSIONS)
    assert rec.SCHEMA_VERSION == max(rec.READABLE_VERSIONS)
    assert schema["properties"]["timed_by"]["enum"] == [*rec.TIMING_METHODS, None]
    assert schema["properties"]["method"]["enum"] == list(rec.METHODS)
    assert schema["properties"]["verdict"]["enum"] == list(rec.VERDICTS)
    assert schema["properties"]["implementation"]["enum"] == list(rec.IMPLEMENTATIONS)


def test_the_schemas_gate_bounds_are_the_gate_tables():
    """docs/records-schema.json's gate range is the gate table's (`tpucourse new-chapter --gate` writes it)."""
    schema = json.loads((REPO / "docs" / "records-schema.json").read_text())
    gate = schema["properties"]["gate"]
    assert (gate["minimum"], gate["maximum"]) == (criteria.GATE_NUMBERS[0], criteria.GATE_NUMBERS[-1])


@pytest.mark.parametrize("content, line, reason", [
    (b"{not json\n", 1, "not a valid row"),
    (b"\n" + b'{"gate": 0}\n', 2, "not a valid row: schema_version None"),
    (None, 2, "the last line has no newline"),
    ("dup", 2, "row id [0-9a-f]+ appears twice"),
    (b'{"schema_version": 1, "gate": 0}\n', 1, "schema_version 1, expected 2 or 3"),
    (b"[1, 2]\n", 1, "a row is a JSON object"),
])
def test_bad_lines_are_reported_with_path_and_line_and_the_rest_kept(tmp_path, content, line, reason):
    path = tmp_path / "r.jsonl"
    good = make_record().to_json().encode() + b"\n"
    if content is None:
        content = good + good[:40]
    elif content == "dup":
        content = good + good
    path.write_bytes(content)
    readout = rec.read(path)
    [bad] = readout.bad
    assert bad.line == line and str(bad).startswith(f"{path}:{line}: ")
    assert __import__("re").search(reason, bad.reason)
    assert len(readout.records) == (1 if good in content else 0)


def test_an_append_after_a_torn_line_stays_whole(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(make_record().to_json().encode()[:30])
    rec.append(path, make_record())
    readout = rec.read(path)
    assert [b.line for b in readout.bad] == [1] and len(readout.records) == 1


def test_repair_moves_bad_lines_aside_and_keeps_every_row(tmp_path):
    path = tmp_path / "r.jsonl"
    failed = make_record(**{**MEASURED, "verdict": "fail"}, samples=[2e-4] * 12, spread=0.0, value=2e-4)
    path.write_bytes(b"garbage\n" + failed.to_json().encode() + b"\n" + make_record().to_json().encode()[:50])
    moved = rec.repair(path)
    assert [b.line for b in moved] == [1, 3]
    assert rec.read(path).records == [failed] and not rec.read(path).bad
    side = [json.loads(line) for line in rec.side_file(path).read_text().splitlines()]
    assert [(s["line"], s["text"][:7]) for s in side] == [(1, "garbage"), (3, '{"calls')]
    rec.append(path, make_record())  # the file is whole again
    assert len(rec.read(path).records) == 2 and rec.repair(path) == []


def _writer(path, n):
    for i in range(n):
        rec.append(path, make_record(test_id=f"w{i}", notes="x" * 5000))


def _spawn_writer(path, n):
    code = (f"{DEFAULT_SIGINT}import sys; sys.path.insert(0, {str(REPO)!r}); from tests.test_records import _writer; "
            f"_writer({str(path)!r}, {n})")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)


def test_concurrent_appends_lose_and_duplicate_nothing(tmp_path):
    path = tmp_path / "r.jsonl"
    writers = [_spawn_writer(path, 100) for _ in range(4)]
    assert [w.wait(60) for w in writers] == [0, 0, 0, 0]
    readout = rec.read(path)
    assert len(readout.records) == 400 and not readout.bad


def test_appends_during_a_repair_are_not_lost(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"garbage\n")
    writers = [_spawn_writer(path, 100) for _ in range(2)]
    while any(w.poll() is None for w in writers):
        rec.repair(path)
    assert [w.wait(60) for w in writers] == [0, 0]
    rec.repair(path)
    assert len(rec.read(path).records) == 200


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_killed_writer_leaves_only_whole_rows(tmp_path, sig):
    path = tmp_path / "r.jsonl"
    writer = _spawn_writer(path, 10**6)
    deadline = time.time() + 30
    while (not path.exists() or path.stat().st_size < 200_000) and time.time() < deadline:
        time.sleep(0.05)
    writer.send_signal(sig)
    writer.wait(30)
    readout = rec.read(path)
    assert len(readout.records) > 10 and len(readout.bad) <= 1  # at most the line being written


def test_records_of_every_run_default_to_an_untracked_file():
    assert rec.DEFAULT_PATH.parts[0] == ".tpucourse"
    assert ".tpucourse/" in (REPO / ".gitignore").read_text().split()
    assert rec.PUBLISHED_PATH.as_posix() == "bench/records.jsonl"


def test_published_records_carry_no_absolute_path_and_no_host():
    rows = rec.read(REPO / rec.PUBLISHED_PATH)
    assert not rows.bad and rows.records
    text = (REPO / rec.PUBLISHED_PATH).read_text()
    assert str(REPO) not in text and "/home/" not in text and '"host"' not in text
    assert {r.tree for r in rows.records} == {"solutions"}


# ---------------------------------------------------------------- how a measured time was taken

TIMED = dict(**{**MEASURED, "timed_by": None}, samples=[1e-4] * 12, spread=0.0, value=1e-4)


def test_a_measured_time_says_how_it_was_timed():
    for method in rec.TIMING_METHODS:
        extra = dict(wall_per_call=1.2e-4, dispatch_bound=False) if method == "device-profiler" else {}
        assert make_record(**{**TIMED, "timed_by": method}, **extra).timing_method == method
    with pytest.raises(HonestyError, match="a measured time says how it was timed"):
        make_record(**TIMED)
    with pytest.raises(ValueError, match="timed_by must be one of device-profiler, wall-calls, got 'stopwatch'"):
        make_record(**{**TIMED, "timed_by": "stopwatch"})
    with pytest.raises(ValueError, match="a time read from the device trace carries the host's wall time"):
        make_record(**{**TIMED, "timed_by": "device-profiler"})
    with pytest.raises(ValueError, match="only a measured time says how it was timed"):
        make_record(timed_by="wall-calls")  # a prediction
    with pytest.raises(ValueError, match="wall_per_call is a positive number"):
        make_record(**{**TIMED, "timed_by": "wall-calls"}, wall_per_call=0.0)


def _schema_2_line(**kw) -> bytes:
    row = json.loads(make_record(**{**TIMED, "timed_by": "wall-calls"}, **kw).to_json())
    for name in ("timed_by", "wall_per_call", "dispatch_bound"):
        del row[name]
    row["schema_version"] = 2
    return (json.dumps(row) + "\n").encode()


def test_a_measured_time_that_does_not_say_how_is_reported_with_its_line(tmp_path):
    path = tmp_path / "r.jsonl"
    row = json.loads(make_record(**{**TIMED, "timed_by": "wall-calls"}).to_json())
    path.write_text(json.dumps({**row, "timed_by": None}) + "\n" + json.dumps({**row, "timed_by": "guess",
                                                                              "id": "b"}) + "\n")
    readout = rec.read(path)
    assert not readout.records
    assert [(b.line, "a measured time says how it was timed" in b.reason) for b in readout.bad] == [(1, True), (2, False)]
    assert "timed_by must be one of device-profiler, wall-calls, got 'guess'" in readout.bad[1].reason


def test_a_row_written_before_rows_said_how_they_were_timed_is_read_as_wall_calls_and_said_so(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_schema_2_line())
    [row] = rec.read(path).records
    assert row.schema_version == 2 and row.timed_by is None
    assert row.timing_method == "wall-calls" and row.timing_assumed
    with pytest.raises(ValueError, match=f"rows are written in schema {rec.SCHEMA_VERSION}, not 2"):
        rec.append(path, row)  # read, never written again


def test_a_schema_2_row_cannot_say_how_it_was_timed(tmp_path):
    path = tmp_path / "r.jsonl"
    row = json.loads(_schema_2_line())
    path.write_text(json.dumps({**row, "timed_by": "device-profiler"}) + "\n")
    [bad] = rec.read(path).bad
    assert "schema_version 2 predates timed_by" in bad.reason


def _trio_rows(tmp_path, harness):
    run = gate_run(tmp_path, gate=1, harness=harness)
    slot = criteria.gate(1).criterion("matmul-near-xla").slots[0]
    result = run.measure_trio("matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                              floor=lambda x: x, kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    assert result.timed
    return [r for r in rec.read(tmp_path / "r.jsonl").records if r.method == "measured"]


def test_rows_say_how_the_harness_timed_them_and_survive_re_judging(tmp_path):
    harness = FakeHarness({"floor": 1e-4, "kernel": 9e-5}, method="device-profiler",
                          wall={"floor": 1.1e-4, "kernel": 2e-4})
    rows = {r.implementation: r for r in _trio_rows(tmp_path, harness)}
    assert {r.timed_by for r in rows.values()} == {"device-profiler"}
    assert (rows["floor"].wall_per_call, rows["floor"].dispatch_bound) == (1.1e-4, False)
    assert (rows["kernel"].wall_per_call, rows["kernel"].dispatch_bound) == (2e-4, True)  # 2e-4 > 1.5 x 9e-5
    accepted, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected and len(accepted) == 3


def test_a_harness_that_does_not_say_timed_wall_calls(tmp_path):
    rows = _trio_rows(tmp_path, FakeHarness({"floor": 1e-4, "kernel": 9e-5}))
    assert {(r.timed_by, r.wall_per_call, r.dispatch_bound) for r in rows} == {("wall-calls", None, False)}


def test_a_dispatch_bound_flag_its_wall_time_does_not_give_is_rejected(tmp_path):
    harness = FakeHarness({"floor": 1e-4, "kernel": 9e-5}, method="device-profiler",
                          wall={"floor": 1.1e-4, "kernel": 2e-4})
    _trio_rows(tmp_path, harness)
    path = tmp_path / "r.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for row in lines:
        if row["implementation"] == "kernel":
            row["dispatch_bound"] = False  # hidden by hand
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    judged = judge.judge_rows(rec.read(path).rows, chips.ChipRegistry())
    [rejected] = judged.rejected
    assert "dispatch_bound False is not what its wall time per call (0.0002 s) and its median" in str(rejected)


def test_a_copy_of_the_checkout_without_git_records_the_commit_it_is_told_and_says_so(tmp_path, monkeypatch):
    from pytest_tpucourse.gates import provenance

    copy = tmp_path / "copy"  # a course tree sent somewhere without its .git
    copy.mkdir()
    monkeypatch.setenv(provenance.COMMIT_VARIABLE, "a" * 40 + "-dirty")
    stated = provenance.provenance("tpu", "TPU v5 lite", copy, "solutions", {})
    assert (stated.git_commit, stated.git_dirty, stated.commit_stated) == ("a" * 40, True, True)
    monkeypatch.setenv(provenance.COMMIT_VARIABLE, "not a commit")
    assert provenance.stated_commit() == (None, None)
    assert provenance.provenance("tpu", "TPU v5 lite", copy, "solutions", {}).git_commit is None
    monkeypatch.setenv(provenance.COMMIT_VARIABLE, "b" * 40)
    repo = tmp_path / "repo"  # a checkout with git of its own
    repo.mkdir()
    (repo / "kernel.py").write_text("v = 1\n")
    for command in (["init", "-q"], ["add", "kernel.py"],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"]):
        subprocess.run(["git", *command], cwd=repo, check=True, capture_output=True)
    in_git = provenance.provenance("tpu", "TPU v5 lite", repo, "solutions", {})
    assert in_git.git_commit != "b" * 40 and not in_git.commit_stated  # a clean tree at HEAD: git's answer
    (repo / "kernel.py").write_text("v = 2\n")  # a copy whose .git is older than its files
    sent = provenance.provenance("tpu", "TPU v5 lite", repo, "solutions", {})
    assert (sent.git_commit, sent.git_dirty, sent.commit_stated) == ("b" * 40, False, True)
    monkeypatch.delenv(provenance.COMMIT_VARIABLE)
    unsaid = provenance.provenance("tpu", "TPU v5 lite", repo, "solutions", {})
    assert unsaid.git_commit == in_git.git_commit and unsaid.git_dirty and not unsaid.commit_stated
    run = gate_run(tmp_path, gate=1)
    run.provenance = stated
    slot = criteria.gate(1).criterion("correct").slots[0]
    run.verify("correct", slot.op, slot.shapes, slot.dtype, check=lambda: None, work=())
    [row] = rec.read(tmp_path / "r.jsonl").records
    assert row.git_commit == "a" * 40 and row.git_dirty
    assert row.notes.startswith("commit as TPUCOURSE_GIT_COMMIT states it (this copy of the checkout has no .git)")
