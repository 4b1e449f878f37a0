"""Gate records: the honesty rule in the constructor, atomic appends, corrupt files reported."""

import json
import signal
import subprocess
import sys
import time

import pytest

from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.records import CorruptRecords, HonestyError, Record

from .support import DEFAULT_SIGINT, REPO


def make_record(**kw) -> Record:
    base = dict(gate=0, criterion="roofline-predicts", chapter="ch10", test_id="t", implementation="floor",
                op="add", shapes=[(4096, 4096), (4096, 4096)], dtype="bfloat16", chip="v5e",
                method="roofline-predicted", statistic="floor", value=1.228e-4, unit="s", verdict="pending",
                platform="cpu", device_kind="cpu", interpret=False, jax="0.10.2", jaxlib="0.10.2")
    return Record(**{**base, **kw})


MEASURED = dict(method="measured", statistic="median", verdict="pass", platform="tpu",
                device_kind="TPU v5 lite")


def test_measured_rows_need_native_hardware():
    make_record(**MEASURED)
    with pytest.raises(HonestyError, match="a cpu run cannot write a measured row"):
        make_record(**{**MEASURED, "platform": "cpu", "device_kind": "cpu"})
    with pytest.raises(HonestyError, match="an interpret-mode run cannot write a measured row"):
        make_record(**MEASURED, interpret=True)
    with pytest.raises(HonestyError, match=r"measured on 'TPU v5 lite' \(v5e\) but labelled v6e"):
        make_record(**{**MEASURED, "chip": "v6e"})


def test_predictions_never_pass_and_off_chip_rows_carry_no_time():
    with pytest.raises(HonestyError, match="a roofline prediction cannot pass"):
        make_record(verdict="pass")
    with pytest.raises(HonestyError, match="an off-chip run cannot record a time"):
        make_record(method="off-chip-verified", verdict="pass", interpret=True)
    with pytest.raises(ValueError, match="only predictions are pending"):
        make_record(method="off-chip-verified", unit="relative error")


@pytest.mark.parametrize("kw, message", [
    (dict(method="guessed"), "method must be one of"), (dict(verdict="ok"), "verdict must be one of"),
    (dict(implementation="mine"), "implementation must be one of"), (dict(gate=6), "gate must be 0-5"),
    (dict(value=float("nan")), "value must be a finite number"),
])
def test_bad_fields_are_rejected(kw, message):
    with pytest.raises(ValueError, match=message):
        make_record(**kw)


def test_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    row = make_record()
    rec.append(path, row)
    assert rec.read(path) == [row]


def test_schema_documents_every_field():
    schema = json.loads((REPO / "docs" / "records-schema.json").read_text())
    fields = set(json.loads(make_record().to_json()))
    assert set(schema["properties"]) == fields
    assert set(schema["required"]) <= fields
    assert schema["properties"]["method"]["enum"] == list(rec.METHODS)
    assert schema["properties"]["verdict"]["enum"] == list(rec.VERDICTS)
    assert schema["properties"]["implementation"]["enum"] == list(rec.IMPLEMENTATIONS)


@pytest.mark.parametrize("content, line, reason", [
    (b"{not json\n", 1, "not a valid row"),
    (b"\n" + b'{"gate": 0}\n', 2, "not a valid row"),
    (None, 2, "the last line has no newline"),
    ("dup", 2, "row id [0-9a-f]+ appears twice"),
])
def test_corrupt_lines_are_reported_with_path_and_line(tmp_path, content, line, reason):
    path = tmp_path / "r.jsonl"
    good = make_record().to_json().encode() + b"\n"
    if content is None:
        content = good + good[:40]
    elif content == "dup":
        content = good + good
    path.write_bytes(content)
    with pytest.raises(CorruptRecords, match=rf"{path}:{line}: {reason}"):
        rec.read(path)


def test_an_append_after_a_torn_line_stays_whole(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(make_record().to_json().encode()[:30])
    rec.append(path, make_record())
    with pytest.raises(CorruptRecords, match=":1: not a valid row"):
        rec.read(path)
    assert Record.from_dict(json.loads(path.read_bytes().splitlines()[1]))


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
    rows = rec.read(path)
    assert len(rows) == 400 and len({r.id for r in rows}) == 400


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_killed_writer_leaves_only_whole_rows(tmp_path, sig):
    path = tmp_path / "r.jsonl"
    writer = _spawn_writer(path, 10**6)
    deadline = time.time() + 30
    while (not path.exists() or path.stat().st_size < 200_000) and time.time() < deadline:
        time.sleep(0.05)
    writer.send_signal(sig)
    writer.wait(30)
    rows = rec.read(path)
    assert len(rows) > 10


def test_a_measured_row_replaces_the_prediction_and_failures_stay(tmp_path):
    predicted = make_record(date="2026-11-01T00:00:00+00:00")
    failed = make_record(**{**MEASURED, "verdict": "fail"}, date="2026-11-02T00:00:00+00:00")
    passed = make_record(**MEASURED, date="2026-11-03T00:00:00+00:00")
    assert rec.current([predicted]) == [predicted]
    assert rec.current([predicted, failed]) == [failed]
    assert rec.current([predicted, failed, passed]) == [passed]
    assert rec.current([failed, predicted]) == [failed]  # a later prediction never displaces a measurement
    assert rec.failures([predicted, failed, passed]) == [failed]
