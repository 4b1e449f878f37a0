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

from .gate_helpers import GATES_TOTAL, MEASURED, make_record
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
    assert schema["properties"]["schema_version"] == {"const": rec.SCHEMA_VERSION}
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
    (b'{"schema_version": 1, "gate": 0}\n', 1, "schema_version 1, expected 2"),
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
    assert [(s["line"], s["text"][:7]) for s in side] == [(1, "garbage"), (3, '{"chapt')]
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
