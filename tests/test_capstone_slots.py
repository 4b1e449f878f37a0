"""Gate 05's slots come from the graded tree's capstone manifest, so an all-pass run can pass it.

The rows here are built by hand (statuses read accepted rows; re-judging is tested elsewhere),
except gate 04's, which the real writer makes on one chip.
"""

import shutil

from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria, judge, report
from pytest_tpucourse.gates import records as rec

from .gate_helpers import MEASURED, gate_run, make_record
from .support import REPO

SOLUTIONS = REPO / "solutions"


def _passing_rows(gates, skip=(4,)) -> list[rec.Record]:
    """One passing measured row (or link) for every slot of every criterion of `gates`."""
    rows = []
    for g in gates:
        if g.number in skip:
            continue
        for c in g.criteria:
            if c.kind == "public":
                rows.append(make_record(gate=g.number, criterion=c.id, chapter=g.chapter, method="self-reported",
                                        statistic=rec.PUBLIC_LINK, value="https://github.com/o/r/pull/1", unit="url",
                                        verdict="pass", implementation="kernel", op="upstream", shapes=[]))
                continue
            for n, slot in enumerate(c.slots or ()):
                timed = {**MEASURED} if c.kind == "speed" else {**MEASURED, "statistic": "checks-passed",
                                                                "timed_by": None}
                rows.append(make_record(**timed, gate=g.number, criterion=c.id,
                                        chapter=g.chapter, implementation=c.judged_implementation, op=slot.op,
                                        shapes=[list(s) for s in slot.shapes], dtype=slot.dtype,
                                        value=1.0 if c.kind == "correctness" else 1e-3,
                                        unit="check" if c.kind == "correctness" else "s",
                                        run_id=f"{g.number}-{c.id}-{n}"))
    return rows


def _gate04_on_one_chip(tmp_path) -> list[rec.Record]:
    run = gate_run(tmp_path, gate=4, devices=1, seconds={})
    run.measure_against_compute_alone(
        "communication-hidden", "all-gather-matmul", [(1024, 512), (512, 4 * 16384)], "bfloat16",
        roofline.matmul_cost(1024, 512, 16384, "bfloat16"), kernel=None, compute_alone=None, kernel_inputs=None, compute_alone_inputs=None, kernel_reference=None,
        compute_alone_reference=None, devices=4)
    return rec.read(tmp_path / "r.jsonl").records


def test_the_solutions_manifest_declares_every_gate05_slot():
    gate = judge.snapshot(SOLUTIONS)[5]
    assert criteria.GATES[5].criterion("beats-xla").slots is None  # the table itself declares none
    speed = gate.criterion("beats-xla").slots
    assert speed == gate.criterion("near-ceiling").slots
    assert [s.op for s in speed] == ["capstone-fwd-window1024", "capstone-fwd-window2048",
                                     "capstone-fwd-bwd-window1024", "capstone-fwd-bwd-window2048"]
    assert speed[0].shapes == ((1, 16, 8192, 128),) * 3 and speed[0].dtype == "bfloat16"
    [correct] = gate.criterion("correct").slots
    assert correct.op == "capstone" and correct.dtype == "bfloat16/float32" and len(correct.shapes) == 12


def test_an_all_pass_set_of_gate05_rows_passes_it_and_the_summary_says_five_of_six(tmp_path):
    gates = judge.snapshot(SOLUTIONS)
    rows = _passing_rows(gates) + _gate04_on_one_chip(tmp_path)
    statuses = report.gate_statuses(rows, "v5e", gates=gates)
    assert set(statuses[5].values()) == {criteria.PASS, criteria.SELF_REPORTED}
    assert report.gates_passed(rows, gates=gates) == 5
    assert report.gate_label(rows, 4, gates=gates).startswith("not runnable on one chip (needs 4 chips)")
    assert report.gate_label(rows, 5, gates=gates).startswith("passed on hardware (v5e)")
    # Judged by the table alone, gate 05's undeclared slots hold it at awaiting hardware.
    assert report.gate_statuses(rows, "v5e")[5]["beats-xla"] == criteria.AWAITING
    assert report.gates_passed(rows) == 4


def test_the_reference_solutions_pass_gate05_on_measured_rows_and_a_learner_still_needs_the_link(tmp_path):
    """The upstream submission is a learner's act: judged for the course's own reference solutions
    (`--solutions`, bench/README.md) it does not apply, so their measured rows pass gate 05 and the
    summary says 5/6; a learner's tree with the same rows and no link stays at 4/6."""
    rows = [r for r in _passing_rows(judge.snapshot(SOLUTIONS)) if r.method != "self-reported"]
    rows += _gate04_on_one_chip(tmp_path)
    reference = judge.snapshot(SOLUTIONS, reference=True)
    statuses = report.gate_statuses(rows, "v5e", gates=reference)
    assert statuses[5]["upstream"] == criteria.NOT_APPLICABLE and statuses[5]["near-ceiling"] == criteria.PASS
    assert report.gates_passed(rows, gates=reference) == 5
    assert "not applicable to the reference solutions" in report.gate_label(rows, 5, gates=reference)
    learners = judge.snapshot(SOLUTIONS)  # the same manifest, read as a learner's tree
    assert report.gate_statuses(rows, "v5e", gates=learners)[5]["upstream"] == criteria.AWAITING
    assert report.gates_passed(rows, gates=learners) == 4
    failing = [r if r.op != "capstone-fwd-window1024" else rec.Record(**{**r.__dict__, "verdict": "fail"})
               for r in rows]  # a reference solution failing a measured criterion fails gate 05 still
    assert report.gates_passed(failing, gates=reference) == 4


def test_one_slot_missing_holds_gate05_back(tmp_path):
    gates = judge.snapshot(SOLUTIONS)
    rows = [r for r in _passing_rows(gates) if r.op != "capstone-fwd-bwd-window2048"]
    assert report.gate_statuses(rows, "v5e", gates=gates)[5]["near-ceiling"] == criteria.AWAITING
    assert report.gates_passed(rows, gates=gates) == 4


def test_a_learners_manifest_declares_the_slots_of_their_own_targets(tmp_path):
    (tmp_path / "ch15").mkdir()
    toml = (SOLUTIONS / "ch15" / "capstone.toml").read_text()
    (tmp_path / "ch15" / "capstone.toml").write_text(toml.replace("window = 1024 }", "window = 512 }"))
    ops = [s.op for s in judge.snapshot(tmp_path)[5].criterion("beats-xla").slots]
    assert ops[0] == "capstone-fwd-window512"


def test_a_manifest_that_declares_no_targets_leaves_gate05_unable_to_pass(tmp_path):
    shutil.copytree(REPO / "exercises" / "ch15", tmp_path / "ch15")  # the stub: TODO fields, no targets
    assert judge.snapshot(tmp_path)[5].criterion("beats-xla").slots is None
    assert judge.snapshot(tmp_path / "nowhere")[5].criterion("beats-xla").slots is None
    (tmp_path / "ch15" / "capstone.toml").write_text("[[targets]\n")  # not TOML
    assert judge.snapshot(tmp_path)[5].criterion("correct").slots is None


def test_the_learners_progress_reads_their_manifest(tmp_path):
    shutil.copytree(SOLUTIONS / "ch15", tmp_path / "exercises" / "ch15",
                    ignore=shutil.ignore_patterns("*.py", "*.md"))
    gates = report.learner_gates(tmp_path).gates
    assert gates[5].criterion("near-ceiling").slots == judge.snapshot(SOLUTIONS)[5].criterion("near-ceiling").slots
