"""bench/capture_tpu_facts.py: what it writes for chapters 4 and 5 (a dry run on this CPU), and that the
kept TPU facts hold every program it compiles, with the header that says how they were made."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from pytest_tpucourse.readers import hlo_text

REPO = Path(__file__).resolve().parents[1]
HEADER = {"chip", "device_kind", "backend", "compiled", "jax", "jaxlib", "libtpu", "python", "date", "command"}


def _capture():
    spec = importlib.util.spec_from_file_location("capture_tpu_facts", REPO / "bench" / "capture_tpu_facts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


CAPTURE = _capture()


def _entries(path: Path) -> dict[str, str]:
    """{program: its ENTRY} of a facts .hlo.txt file, after its header block."""
    blocks = re.split(r"^// ", path.read_text(encoding="utf-8"), flags=re.M)[2:]
    return dict(block.split("\n", 1) for block in blocks)


def _check_written(folder: Path, chip: str, sweep) -> dict:
    """The facts of one chapter folder, checked against each other and the programs the capture compiles."""
    facts = json.loads((folder / f"{chip}.json").read_text(encoding="utf-8"))
    assert set(facts["captured"]) == HEADER, facts["captured"]
    assert facts["captured"]["command"].startswith("python bench/capture_tpu_facts.py"), facts["captured"]
    chapter = folder.name if folder.name != "facts" else folder.parent.name
    expected = [p.key for p in CAPTURE.programs(sweep) if chapter in p.chapters]
    assert list(facts["programs"]) == expected
    entries = _entries(folder / f"{chip}.hlo.txt")
    assert list(entries) == expected
    for key, record in facts["programs"].items():
        module = hlo_text.parse(entries[key])
        launched = [i.opcode for i in module.entry.instructions if i.opcode not in hlo_text.NOT_KERNELS]
        assert launched == [line.rsplit(" ", 1)[1] for line in record["kernels"]], key
        assert record["bytes_accessed"] > 0 and record["temp_bytes"] >= 0, key
        assert "metadata=" not in entries[key] and "backend_config=" not in entries[key], key
    return facts


def test_a_dry_run_writes_each_chapters_facts_with_their_header(tmp_path, capsys):
    assert CAPTURE.main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert "wrote" in capsys.readouterr().out
    ch04 = _check_written(tmp_path / "ch04", "cpu", CAPTURE.DRY_RUN_SWEEP)
    ch05 = _check_written(tmp_path / "ch05", "cpu", CAPTURE.DRY_RUN_SWEEP)
    assert ch04["captured"]["command"] == "python bench/capture_tpu_facts.py --dry-run"
    assert ch04["captured"]["backend"] == "cpu" and ch04["captured"]["device_kind"] == "cpu"
    # XLA:CPU's figures, as chapter 4's README quotes them (layer norm's bytes) and chapter 5's (naive
    # attention's two S x S buffers): the capture reads what the chapters read.
    assert ch04["programs"]["layer_norm S=256"]["bytes_accessed"] == 400_904
    assert ch05["programs"]["attention_floor S=256"]["temp_bytes"] >= 2 * 256 * 256 * 4


@pytest.mark.parametrize("chapter", ["ch04", "ch05"])
def test_the_kept_tpu_facts_hold_every_program_and_say_how_they_were_made(chapter):
    facts = _check_written(REPO / "exercises" / chapter / "facts", "v5e", CAPTURE.SWEEP)
    head = facts["captured"]
    assert (head["chip"], head["device_kind"], head["backend"]) == ("v5e", "TPU v5 lite", "tpu"), head
    header_line = (REPO / "exercises" / chapter / "facts" / "v5e.hlo.txt").read_text(encoding="utf-8").splitlines()[0]
    assert all(f"{key} {value}" in header_line for key, value in head.items()), header_line


def test_without_a_tpu_the_capture_says_how_to_run_it(monkeypatch):
    import jax

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    with pytest.raises(SystemExit, match="no TPU here .*--described CHIP, or --dry-run"):
        CAPTURE.main([])
