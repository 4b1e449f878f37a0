"""Ceiling sweeps kept between runs (gates/sweeps.py): a later run on the same chip and versions times
only the kept choice, in its own rounds, and says so; --resweep, new versions or new candidates sweep again."""

from pathlib import Path

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria, sweeps
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.rehearsal import Rehearsal

from .gate_helpers import FakeHarness, gate_run, read_judged

SLOT = criteria.gate(3).criterion("near-ceiling").slots[0]
SECONDS = {"floor": 1e-4, "kernel": 6.5e-5, "ceiling": 6e-5, "128": 8e-5, "512": 6e-5}


def _candidates(**replace):
    return {"128": lambda x: x, "512": lambda x: x, **replace}


def _trio(tmp_path, sweeps_path, candidates=None, **run):
    harness = FakeHarness(SECONDS)
    gate = gate_run(tmp_path, harness=harness, sweeps_path=sweeps_path, **run)
    result = gate.measure_trio("near-ceiling", SLOT.op, SLOT.shapes, SLOT.dtype, roofline.Cost(1e9, 1e6),
                               floor=lambda x: x, kernel=lambda x: x, ceiling=candidates or _candidates(),
                               inputs=lambda seed: (float(seed),))
    assert result.status == "pass", result.message
    [ceiling] = [r for r in rec.read(tmp_path / "r.jsonl").records
                 if r.implementation == "ceiling" and r.run_id == result.rows[0].run_id]
    return harness.asked, ceiling


def test_a_sweep_is_kept_and_a_later_run_times_only_its_choice_and_says_so(tmp_path):
    kept = tmp_path / "sweeps.jsonl"
    asked, first = _trio(tmp_path, kept)
    assert asked == [("128", "512"), ("floor", "kernel", "ceiling")]  # swept, then the trio's rounds
    [sweep] = sweeps.read(kept)[0]
    assert (sweep.best, sweep.candidates, sweep.key.op, sweep.key.device_kind) == ("512", ("128", "512"), SLOT.op,
                                                                                   "TPU v5 lite")
    assert sweep.times == {"128": pytest.approx(8e-5), "512": pytest.approx(6e-5)}
    assert "chose 512" in first.notes and "reused" not in first.notes
    asked, again = _trio(tmp_path, kept)
    assert asked == [("floor", "kernel", "ceiling")]  # no sweep: the kept choice, re-timed in this run's rounds
    assert f"ceiling 512, the choice of a sweep kept from an earlier run (swept {sweep.date[:10]} over 2 block " \
           f"sizes (128: 80.0 us; 512: 60.0 us), chose 512), reused: only the choice, timed in this run's rounds" \
           in again.notes
    assert again.run_id != first.run_id and len(again.samples) == len(first.samples)  # its own rounds
    accepted, rejected = read_judged(tmp_path / "r.jsonl")
    assert not rejected


@pytest.mark.parametrize("change", ["resweep", "jax", "candidates", "chip kind"])
def test_a_sweep_is_run_again_when_asked_or_when_what_decides_it_changed(tmp_path, change):
    kept = tmp_path / "sweeps.jsonl"
    _trio(tmp_path, kept)
    run = {"resweep": dict(resweep=True), "jax": dict(jax="0.11.0"),
           "chip kind": dict(device_kind="TPU v5e")}.get(change, {})
    candidates = _candidates(**{"256": lambda x: x}) if change == "candidates" else None
    if change == "candidates":
        SECONDS["256"] = 7e-5
    try:
        asked, ceiling = _trio(tmp_path, kept, candidates, **run)
    finally:
        SECONDS.pop("256", None)
    assert len(asked) == 2 and "reused" not in ceiling.notes
    assert len(sweeps.read(kept)[0]) == 2


def test_a_kept_choice_wrong_here_is_swept_again(tmp_path):
    kept = tmp_path / "sweeps.jsonl"
    _trio(tmp_path, kept)
    asked, ceiling = _trio(tmp_path, kept, _candidates(**{"512": lambda x: x * 0 - 7}))
    assert asked == [("floor", "kernel", "ceiling")]  # one correct candidate left: nothing to sweep between
    assert ceiling.notes.count("the kept choice 512 was wrong here, swept again") == 1
    assert "512: wrong or failed" in ceiling.notes and "chose 128" in ceiling.notes


def test_a_rehearsals_sweep_is_never_read_by_a_run_on_the_chip(tmp_path):
    rehearsal = Rehearsal(path=tmp_path / f"t{rec.REHEARSAL_SUFFIX}")
    path = sweeps.path_for(tmp_path, rehearsal.path)
    assert path.name == sweeps.REHEARSAL_NAME and path.parent == tmp_path
    assert sweeps.path_for(tmp_path, None) == tmp_path / ".tpucourse" / "ceiling-sweeps.jsonl"
    harness = FakeHarness(SECONDS)
    run = gate_run(tmp_path, platform="cpu", device_kind="cpu", harness=harness, rehearsal=rehearsal,
                   sweeps_path=path)
    run.measure_trio("near-ceiling", SLOT.op, SLOT.shapes, SLOT.dtype, roofline.Cost(1e9, 1e6), floor=lambda x: x,
                     kernel=lambda x: x, ceiling=_candidates(), inputs=lambda seed: (float(seed),))
    [sweep] = sweeps.read(path)[0]
    assert sweep.rehearsal
    copied = tmp_path / "sweeps.jsonl"  # copied by hand where a run on the chip reads
    copied.write_text(path.read_text())
    assert sweeps.kept(copied, sweep.key, sweep.candidates) is None
    with pytest.raises(ValueError, match="a rehearsal's sweep is kept only in"):
        sweeps.keep(copied, sweep)


def test_a_bad_line_among_the_kept_sweeps_is_reported_and_the_sweep_run_again(tmp_path):
    kept = tmp_path / "sweeps.jsonl"
    kept.write_text('{"key": "torn"}\n[1]\n')
    asked, _ = _trio(tmp_path, kept)
    assert asked[0] == ("128", "512")
    good, bad = sweeps.read(kept)
    assert len(good) == 1 and [b.line for b in bad] == [1, 2]
    assert "not a kept sweep" in bad[0].reason and "a line is a JSON object" in bad[1].reason


SWEEP_TESTS = """
    import jax
    import pytest
    from jax.experimental import pallas as pl
    from pytest_tpucourse import roofline
    from pytest_tpucourse.gates import criteria

    SLOT = criteria.gate(3).criterion("near-ceiling").slots[0]


    def _double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2


    def double(x):
        return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


    @pytest.mark.gate(3)
    @pytest.mark.parametrize("again", [False, True])
    def test_speed(gate_run, again):
        import jax.numpy as jnp
        gate_run.measure_trio("near-ceiling", SLOT.op, SLOT.shapes, SLOT.dtype, roofline.Cost(1e9, 1e6),
                              floor=lambda x: x * 2, kernel=double, ceiling={"128x128": double, "256x256": double},
                              inputs=lambda seed: (jnp.full((8, 128), float(seed)),))
"""


def test_a_rehearsal_keeps_its_sweep_beside_its_rows_and_reuses_it(fake_course):
    fake_course.test_file(SWEEP_TESTS, "test_gate.py")
    result = fake_course.run("--gates", "--rehearse", "--chip=v5e")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["gate 03: 2 tests, 2 slots timed, *s", "rehearsal: 2/2 gate tests ran through"])
    path = [line for line in result.stdout.lines if line.startswith("rehearsal rows: ")][0]
    rows = rec.read(path.split(" written to ")[1].split(" (")[0]).records
    ceilings = [r for r in rows if r.implementation == "ceiling"]
    assert len(ceilings) == 2 and "reused" not in ceilings[0].notes
    assert "the choice of a sweep kept from an earlier run" in ceilings[1].notes and "reused" in ceilings[1].notes
    kept = Path(path.split(" written to ")[1].split(" (")[0]).with_name(sweeps.REHEARSAL_NAME)
    [sweep] = sweeps.read(kept)[0]
    assert sweep.rehearsal and set(sweep.candidates) == {"128x128", "256x256"}
    assert not (fake_course.pytester.path / sweeps.PATH).exists()  # nothing kept where a chip's run reads


def _course_sweep(tmp_path, best="128"):
    """The course's own sweep of the test slot, as bench/tpu/ceiling-sweeps.jsonl would hold it."""
    course = tmp_path / "course-sweeps.jsonl"
    key = gate_run(tmp_path)._sweep_key(SLOT.op, SLOT.shapes, SLOT.dtype)
    sweeps.keep(course, sweeps.Sweep(key=key, candidates=("128", "512"), times={"128": 5e-5, "512": 7e-5},
                                     best=best, date="2026-12-06T01:12:59+00:00"))
    return course


def test_without_a_sweep_of_its_own_a_run_takes_the_courses_choice_for_this_chip_and_versions(tmp_path):
    course = _course_sweep(tmp_path)
    own = tmp_path / "sweeps.jsonl"
    asked, ceiling = _trio(tmp_path, own, course_sweeps_path=course)
    assert asked == [("floor", "kernel", "ceiling")]  # no sweep: the course's choice, timed in this run's rounds
    assert ("ceiling 128, the choice of a sweep the course made on a TPU v5 lite with these versions "
            "(bench/tpu/ceiling-sweeps.jsonl) (swept 2026-12-06 over 2 block sizes") in ceiling.notes
    assert not own.exists()  # nothing of the learner's was swept, so nothing is kept as theirs
    asked, _ = _trio(tmp_path, own, course_sweeps_path=course, jax="0.11.0")  # other versions: swept here
    assert asked[0] == ("128", "512") and len(sweeps.read(own)[0]) == 1
    asked, ceiling = _trio(tmp_path, own, course_sweeps_path=course, jax="0.11.0")
    assert asked == [("floor", "kernel", "ceiling")] and "kept from an earlier run" in ceiling.notes


def test_a_runs_own_sweep_comes_before_the_courses_and_resweep_reads_neither(tmp_path):
    course = _course_sweep(tmp_path, best="128")
    own = tmp_path / "sweeps.jsonl"
    _trio(tmp_path, own)  # its own sweep chose 512
    _, ceiling = _trio(tmp_path, own, course_sweeps_path=course)
    assert "ceiling 512, the choice of a sweep kept from an earlier run" in ceiling.notes
    asked, ceiling = _trio(tmp_path, own, course_sweeps_path=course, resweep=True)
    assert asked[0] == ("128", "512") and "reused" not in ceiling.notes
    assert sweeps.course_path_for(tmp_path, None) == tmp_path / "bench" / "tpu" / "ceiling-sweeps.jsonl"
    assert sweeps.course_path_for(tmp_path, tmp_path / f"t{rec.REHEARSAL_SUFFIX}") is None


def test_the_courses_sweeps_are_measured_on_a_chip_and_match_what_its_gates_search_today():
    """Each line of bench/tpu/ceiling-sweeps.jsonl is a chip's search of a slot a gate times today, over
    the very space that gate searches there (gates/ceilings.py), and says where its choice sits: a line
    the gates would never match is dead weight. Gate 03's slots are its criteria's; gate 05's are the
    shipped manifest's targets."""
    import tomllib

    from pytest_tpucourse.gates import ceilings

    from .support import REPO

    found, bad = sweeps.read(REPO / sweeps.COURSE_PATH)
    assert bad == []
    offered = {}  # (gate, op, shapes, dtype) -> the identity of the space the gate searches there
    for c in criteria.gate(3).criteria:
        for s in c.slots or ():
            _, _, seq, head_dim = s.shapes[0]
            causal, backward = "causal" in s.op, s.op.endswith("fwd-bwd")
            offered[(3, s.op, s.shapes, s.dtype)] = ceilings.flash_space(
                None, q_len=seq, kv_len=seq, backward=backward, causal=causal).identity()
    manifest = tomllib.loads((REPO / "solutions" / "ch15" / "capstone.toml").read_text())
    for t in manifest["targets"][:criteria.CAPSTONE_TIMED_TARGETS]:
        shape = (t["batch"], t["heads"], t["seq"], t["head_dim"])
        for backward in (False, True):
            space = ceilings.splash_space(None, q_len=t["seq"], kv_len=t["seq"], backward=backward, **t["options"])
            offered[(5, criteria.capstone_op(backward, t["options"]), (shape,) * 3, t["dtype"])] = space.identity()
    for sweep in found:
        assert not sweep.rehearsal and sweep.key.device_kind.startswith("TPU")
        slot = (sweep.key.gate, sweep.key.op, sweep.key.shapes, sweep.key.dtype)
        assert slot in offered, f"{slot} is no slot a gate times today"
        assert sweep.space == offered[slot] and sweep.choice and sweep.placement
