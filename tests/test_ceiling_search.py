"""A ceiling's search over its space (gates/sweeps.py `search`): a choice at the edge of what was tried
extends the search past that edge, stops at the space's limits and says so, and stays within its budget."""

import math

from pytest_tpucourse.gates import sweeps

BLOCKS = (128, 256, 512, 1024, 2048, 4096)


def _space(best, *, limit=lambda k: None, start=None, budget=16, fused=None):
    """A space of (q, kv) blocks whose time is least at `best`: log-distance from it, in microseconds."""
    axes = [sweeps.Axis("q", BLOCKS, end="the sequence"), sweeps.Axis("kv", BLOCKS, end="the sequence")]
    if fused is not None:
        axes.append(sweeps.Axis("fused", (False, True)))

    def build(knobs):
        seconds = 1e-4 * (1 + sum(abs(math.log2(knobs[n] / best[n])) for n in ("q", "kv")))
        if fused is not None and knobs["fused"] != fused:
            seconds *= 1.1
        return lambda: seconds

    start = start or ({"q": 128, "kv": 128}, {"q": 512, "kv": 512})
    if fused is not None:
        start = tuple({**k, "fused": False} for k in start)
    return sweeps.Space("toy", tuple(axes), build, start, limit=limit, budget=budget)


def _measure(asked):
    def measure(fns):
        asked.append(sorted(fns))
        return {label: fn() for label, fn in fns.items()}
    return measure


def test_a_choice_at_the_edge_of_the_start_extends_the_search_until_it_is_interior():
    asked = []
    found = sweeps.search(_space({"q": 512, "kv": 1024}), _measure(asked))
    assert found.best == "q512-kv1024" and found.interior
    assert found.placement == "interior: every neighbour along every axis timed slower"
    assert asked[0] == ["q128-kv128", "q512-kv512"] and len(asked) > 2  # the start, then past its edge
    assert len(found.tried) <= 16
    for label in ("q256-kv1024", "q1024-kv1024", "q512-kv512", "q512-kv2048"):  # every neighbour timed
        assert found.times[label] > found.times["q512-kv1024"]


def test_the_last_value_of_an_axis_is_an_edge_that_says_why():
    found = sweeps.search(_space({"q": 4096, "kv": 256}, start=({"q": 1024, "kv": 256},)), _measure([]))
    assert found.best == "q4096-kv256" and not found.interior
    assert found.edges == ("q up: the sequence, 4096",)


def test_a_limit_stops_the_search_and_the_choice_says_it_is_at_that_limit():
    vmem = lambda k: f"{k['q']}x{k['kv']} exceeds the scoped VMEM" if k["q"] * k["kv"] > 512 * 1024 else None
    found = sweeps.search(_space({"q": 2048, "kv": 2048}, limit=vmem), _measure([]))
    assert found.best in ("q512-kv1024", "q1024-kv512")
    assert not found.interior and all("exceeds the scoped VMEM" in e for e in found.edges)
    assert all(vmem(k) is None for k in found.tried.values())  # nothing out of the space is timed


def test_a_spent_budget_is_said_not_interior():
    found = sweeps.search(_space({"q": 4096, "kv": 4096}, budget=4), _measure([]))
    assert len(found.tried) == 4 and not found.interior
    assert "untried (budget of candidates spent)" in found.placement


def test_an_on_off_knob_is_tried_both_ways_and_has_no_edge():
    found = sweeps.search(_space({"q": 512, "kv": 512}, fused=True), _measure([]))
    assert found.best == "q512-kv512-fused" and found.interior
    assert "q512-kv512" in found.times


def test_a_failing_neighbour_is_an_edge_named_by_its_failure():
    space = _space({"q": 512, "kv": 512})

    def measure(fns):
        out = {label: fn() for label, fn in fns.items() if "q1024" not in label}
        out.update({(label, "failed"): "E1001 scoped VMEM" for label in fns if "q1024" in label})
        return out

    found = sweeps.search(space, measure)
    assert found.best == "q512-kv512"
    assert found.edges == ("q up: q1024-kv512 failed (E1001 scoped VMEM)",)


def test_a_searched_sweep_is_kept_by_its_space_and_its_choice(tmp_path):
    space = _space({"q": 512, "kv": 1024})
    found = sweeps.search(space, _measure([]))
    key = sweeps.SweepKey("v5e", "TPU v5 lite", "0.10.2", "0.10.2", None, 3, "attention-fwd", [(1, 2, 4096, 128)],
                          "bfloat16")
    path = tmp_path / "s.jsonl"
    sweeps.keep(path, sweeps.Sweep(key=key, candidates=tuple(found.tried), times=found.times, best=found.best,
                                   space=space.identity(), choice=found.tried[found.best],
                                   placement=found.placement))
    kept = sweeps.kept(path, key, space)
    assert kept.choice == {"q": 512, "kv": 1024} and "interior" in kept.describe()
    wider = sweeps.Space("toy", space.axes + (sweeps.Axis("fused", (False, True)),), space.build, space.start)
    assert sweeps.kept(path, key, wider) is None  # another space: swept again
    assert sweeps.kept(path, key, list(found.tried)) is None  # a list of candidates never takes a space's sweep


def test_a_gate_run_searches_a_space_names_the_choice_and_where_it_sits_and_a_later_run_reuses_it(tmp_path):
    from pytest_tpucourse import roofline
    from pytest_tpucourse.gates import criteria
    from pytest_tpucourse.gates import records as rec

    from .gate_helpers import FakeHarness, gate_run, read_judged

    slot = criteria.gate(3).criterion("near-ceiling").slots[0]
    seconds = {"floor": 1e-3, "kernel": 1.0e-4, "ceiling": 9e-5}
    space = _space({"q": 512, "kv": 1024})
    seconds.update({space.label(k): fn() for k in _every(space) for fn in [space.build(k)]})
    space = sweeps.Space(space.name, space.axes, lambda knobs: (lambda x: x), space.start)  # correct outputs
    kept = tmp_path / "kept.jsonl"

    def run():
        harness = FakeHarness(seconds)
        result = gate_run(tmp_path, harness=harness, sweeps_path=kept).measure_trio(
            "near-ceiling", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6), floor=lambda x: x,
            kernel=lambda x: x, ceiling=space, inputs=lambda seed: (float(seed),))
        [ceiling] = [r for r in rec.read(tmp_path / "r.jsonl").records
                     if r.implementation == "ceiling" and r.run_id == result.rows[0].run_id]
        return harness.asked, ceiling

    asked, first = run()
    assert len(asked) > 2 and asked[-1] == ("floor", "kernel", "ceiling")
    assert "chose q512-kv1024, interior: every neighbour along every axis timed slower" in first.notes
    assert first.notes.startswith("ceiling toy: chose q512-kv1024")  # first: notes are cut at 1000 characters
    asked, again = run()
    assert asked == [("floor", "kernel", "ceiling")]  # the kept choice, timed in this run's rounds only
    assert "ceiling q512-kv1024 of toy, the choice of a search kept from an earlier run" in again.notes
    assert "interior" in again.notes
    assert not read_judged(tmp_path / "r.jsonl")[1]


def _every(space):
    return [{"q": q, "kv": kv} for q in BLOCKS for kv in BLOCKS]


def test_a_search_whose_budget_ran_out_continues_from_its_choice_and_tries_nothing_twice():
    space = _space({"q": 4096, "kv": 4096}, budget=4)
    first = sweeps.search(space, _measure([]))
    assert "untried (budget of candidates spent)" in first.placement
    kept = sweeps.Sweep(key=None, candidates=tuple(first.tried), best=first.best, space=space.identity(),
                        choice=first.tried[first.best], placement=first.placement, times=dict(first.times))
    assert sweeps.unfinished(kept)
    asked = []
    found = sweeps.search(_space({"q": 4096, "kv": 4096}, budget=16), _measure(asked), kept)
    assert found.best == "q4096-kv4096" and found.edges == ("q up: the sequence, 4096", "kv up: the sequence, 4096")
    new = [label for batch in asked for label in batch if label != kept.best]
    assert new and not set(new) & (set(kept.candidates) - {kept.best})  # nothing tried twice
    assert kept.best in asked[0]  # the choice timed again beside the neighbours it left
    assert set(kept.candidates) <= set(found.tried)


def test_a_gate_run_continues_an_unfinished_kept_search_only_when_asked(tmp_path):
    import dataclasses

    from pytest_tpucourse import roofline
    from pytest_tpucourse.gates import criteria
    from pytest_tpucourse.gates import records as rec

    from .gate_helpers import FakeHarness, gate_run

    slot = criteria.gate(3).criterion("near-ceiling").slots[0]
    seconds = {"floor": 1e-3, "kernel": 1.0e-4, "ceiling": 9e-5}
    space = _space({"q": 4096, "kv": 4096}, budget=4)
    seconds.update({space.label(k): fn() for k in _every(space) for fn in [space.build(k)]})
    space = sweeps.Space(space.name, space.axes, lambda knobs: (lambda x: x), space.start, budget=4)
    kept = tmp_path / "kept.jsonl"

    def run(finish):
        harness = FakeHarness(seconds)
        gates = gate_run(tmp_path, harness=harness, sweeps_path=kept)
        gates.context = dataclasses.replace(gates.context, finish_searches=finish)
        result = gates.measure_trio("near-ceiling", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                                    floor=lambda x: x, kernel=lambda x: x, ceiling=space,
                                    inputs=lambda seed: (float(seed),))
        [ceiling] = [r for r in rec.read(tmp_path / "r.jsonl").records
                     if r.implementation == "ceiling" and r.run_id == result.rows[0].run_id]
        return harness.asked, ceiling

    asked, first = run(False)
    assert "NOT interior" in first.notes and len(asked) > 1
    asked, reused = run(False)
    assert asked == [("floor", "kernel", "ceiling")] and "--finish-searches continues it" in reused.notes
    asked, continued = run(True)
    assert len(asked) > 1 and "continued from its choice" in continued.notes
    assert len(sweeps.read(kept)[0]) == 2  # the first search and its continuation, the latest the one reused
