"""pytest_tpucourse.instruments.ici (collectives over ICI), collective_checks, and `tpucourse mesh`."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_tpucourse import checks, chips
from pytest_tpucourse.commands import main
from pytest_tpucourse.readers import compiled_collectives
from pytest_tpucourse.instruments import ici
from pytest_tpucourse.core.outcomes import WrongResult

LINKS = [(True, True), (True, False), (False, True)]  # (bidirectional, wraparound)


@given(op=st.sampled_from(["all-gather", "reduce-scatter"]), size=st.integers(1, 33),
       links=st.sampled_from(LINKS))
def test_the_package_schedule_has_every_property(op, size, links):
    bidirectional, wraparound = links
    schedule = ici.ring_schedule(op, size, bidirectional=bidirectional, wraparound=wraparound)
    assert ici.schedule_problems(op, size, schedule, bidirectional=bidirectional,
                                 wraparound=wraparound) == []


def test_step_counts():
    assert [ici.steps(x) for x in (1, 2, 3, 4, 5, 8)] == [0, 1, 1, 2, 2, 4]
    assert [ici.steps(x, bidirectional=False) for x in (1, 2, 5, 8)] == [0, 1, 4, 7]
    assert [ici.steps(x, wraparound=False) for x in (1, 2, 5, 8)] == [0, 1, 4, 7]
    with pytest.raises(ValueError, match="line of 4 chips used one way"):
        ici.steps(4, bidirectional=False, wraparound=False)


@pytest.mark.parametrize("schedule, problem", [
    ([[(0, 1, 0), (1, 2, 1), (2, 0, 2)]], "1 steps; this collective needs exactly 2"),
    ([[(0, 1, 1), (1, 2, 1), (2, 0, 2)], [(0, 1, 2), (1, 2, 0), (2, 0, 1)]], "does not hold chunk 1"),
    ([[(0, 2, 0), (1, 2, 1), (2, 0, 2)], [(0, 1, 2), (1, 2, 0), (2, 0, 1)]], "no such link"),
    ([[(0, 1, 0), (0, 1, 0), (1, 2, 1), (2, 0, 2)], [(0, 1, 2), (1, 2, 0), (2, 0, 1)]],
     "carries 2 chunks"),
    ("not a schedule", "a schedule is a list of steps"),
])
def test_wrong_schedules_are_named(schedule, problem):
    """A 3-chip ring used one way: every kind of mistake shows in the problems."""
    found = ici.schedule_problems("all-gather", 3, schedule, bidirectional=False)
    assert any(problem in p for p in found), found


def test_reduce_scatter_double_counting_is_named():
    schedule = [[(0, 1, 2), (1, 2, 0), (2, 0, 1)], [(0, 1, 2), (1, 2, 0), (2, 0, 1)]]
    found = ici.schedule_problems("reduce-scatter", 3, schedule, bidirectional=False)
    assert any("a second time" in p for p in found), found


def test_the_scaling_books_worked_numbers():
    """How to Scale Your Model, part 3, pop quiz 2 and problem 1 (its rounding: 34e6 bytes)."""
    v5e = ici.link_bandwidth(chips.get_chip("v5e"))
    assert ici.seconds("all-gather", 34e6, 4, link_bandwidth=v5e) == pytest.approx(377.8e-6, rel=1e-3)
    assert ici.seconds("all-gather", 4 * 8.4e6, 4, link_bandwidth=v5e, wraparound=False) == \
        pytest.approx(560e-6)
    assert ici.seconds("all-gather", 4 * 64 * 256 * 2, 4, link_bandwidth=v5e, wraparound=False,
                       hop_latency=1e-6) == pytest.approx(3e-6)
    v4 = ici.link_bandwidth(chips.get_chip("v4"))
    assert ici.seconds("all-gather", 2 * 1024 * 4096 / 4, 4, link_bandwidth=v4) == \
        pytest.approx(23.3e-6, rel=1e-3)
    assert ici.seconds("all-reduce", 34e6, 16, link_bandwidth=v5e) == \
        pytest.approx(2 * ici.seconds("all-gather", 34e6, 16, link_bandwidth=v5e))


def test_a_chip_without_a_cited_figure_raises():
    with pytest.raises(ValueError, match="no cited ICI link bandwidth for v2"):
        ici.link_bandwidth(chips.get_chip("v2"))
    with pytest.raises(ValueError, match="no cited wraparound rule for v7x"):
        ici.wraparounds(chips.get_chip("v7x"), (4, 4, 4))


@pytest.mark.parametrize("chip, topology, wraps", [
    # v5e and v6e: a 16x16 torus without optical switches wraps along any axis of 16
    ("v5e", (4, 4), (False, False)),
    ("v5e", (8, 16), (False, True)),
    ("v6e", (16, 16), (True, True)),
    # v4 and v5p: the optical switches wrap whole 4x4x4 cubes (and their multiples) only
    ("v5p", (4, 4, 4), (True, True, True)),
    ("v5p", (4, 4, 8), (True, True, True)),
    ("v4", (8, 8, 12), (True, True, True)),
    ("v5p", (2, 2, 4), (False, False, False)),  # the scaling book: "won't have any wraparounds"
    ("v5p", (4, 4, 2), (False, False, False)),
    ("v4", (2, 2, 1), (False, False, False)),
    ("v5p", (4, 4), (False, False)),  # not a cube
])
def test_wraparounds_follow_the_scaling_book(chip, topology, wraps):
    assert ici.wraparounds(chips.get_chip(chip), topology) == wraps


def _mesh(capsys, chip, topology, op="all-gather", nbytes="1MB") -> str:
    assert main.main(["mesh", "--chip", chip, "--topology", topology, "--op", op, "--bytes", nbytes]) == 0
    return capsys.readouterr().out


def test_mesh_draws_a_2x2x4_v5p_slice_without_rings(capsys):
    out = _mesh(capsys, "v5p", "2x2x4")
    assert "all-gather along axis 2: 4 chips, line (no wraparound link)" in out
    assert "wraparound: every axis wraps around when the slice is made of whole 4x4x4 cubes" in out
    assert "all-gather along axis 2: 4 chips, ring, links used both ways" in _mesh(capsys, "v5p", "4x4x4")


def test_a_slice_runs_axis_after_axis():
    phases = ici.plan("all-gather", 2**30, (4, 4), link_bandwidth=4.5e10, wraparound=(False, False))
    assert [(p.axis, p.chunk_bytes) for p in phases] == [(0, 2**30 / 16), (1, 2**30 / 4)]
    assert sum(p.seconds for p in phases) == pytest.approx(3 * (2**30 / 16 + 2**30 / 4) / 4.5e10)
    reduce = ici.plan("all-reduce", 2**30, (4, 4), link_bandwidth=4.5e10, wraparound=(False, False))
    assert [p.op for p in reduce] == ["reduce-scatter"] * 2 + ["all-gather"] * 2


@pytest.mark.parametrize("text, value", [("1GiB", 2**30), ("512MB", 512 * 10**6), ("34e6", 34 * 10**6),
                                         ("8 KiB", 8192)])
def test_parse_bytes(text, value):
    assert ici.parse_bytes(text) == value


def test_mesh_command_prints_the_steps_and_a_labelled_prediction(capsys):
    out = _mesh(capsys, "v5e", "4x4", nbytes="1GiB")
    assert "all-gather along axis 0: 4 chips, line (no wraparound link), links used both ways; 3 steps" in out
    assert "  step 1: 0->1 c0, 1->0 c1, 1->2 c1, 2->1 c2, 2->3 c2, 3->2 c3" in out
    assert "predicted: 22369.6 us (roofline prediction" in out


def test_mesh_command_counts_the_steps_of_a_huge_axis_without_building_them(capsys, monkeypatch):
    """A 100000x100000 slice has about 10^10 sends per axis: the command counts its steps and
    lists no send (it grew past 4 GB listing them before)."""
    monkeypatch.setattr(ici, "ring_schedule", lambda *a, **k: pytest.fail("a schedule was built"))
    out = _mesh(capsys, "v5e", "100000x100000", nbytes="1GiB")
    assert "all-gather along axis 0: 100000 chips, line (no wraparound link), links used both ways; 99999 steps" in out
    assert "the sends of each step are listed for axes of at most 64 chips" in out
    assert "predicted: " in out


def test_mesh_command_refuses_what_it_cannot_cite(capsys):
    assert main.main(["mesh", "--chip", "v2", "--topology", "4", "--op", "all-gather", "--bytes", "1MB",
                     "--wraparound", "yes"]) == 2
    assert "no cited ICI link bandwidth for v2" in capsys.readouterr().err


def _ring_psum(mesh):
    """A correct ring all-reduce (one-way, chunked) and lax.psum, as graded functions."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    axis, n = mesh.axis_names[0], mesh.shape[mesh.axis_names[0]]

    def ring(a):
        chunks = a.reshape(n, -1, a.shape[-1])
        i = lax.axis_index(axis)
        right = [(j, (j + 1) % n) for j in range(n)]
        for s in range(n - 1):
            chunks = chunks.at[(i - s - 1) % n].add(lax.ppermute(chunks[(i - s) % n], axis, right))
        for s in range(n - 1):
            chunks = chunks.at[(i - s) % n].set(lax.ppermute(chunks[(i + 1 - s) % n], axis, right))
        return chunks.reshape(a.shape)

    spec = jax.P(axis)
    ring_fn = jax.shard_map(ring, mesh=mesh, in_specs=spec, out_specs=spec)
    psum_fn = jax.shard_map(lambda a: lax.psum(a, axis), mesh=mesh, in_specs=spec, out_specs=spec)
    return checks.graded(ring_fn, "ring"), checks.graded(psum_fn, "psum"), jnp.ones((n * 8, 16))


def test_collective_checks_tell_a_ring_from_psum(mesh):
    ring, psum, x = _ring_psum(mesh(4))
    ops = [c.op for c in compiled_collectives.compiled_collectives(ring, x)]
    assert ops == ["collective-permute"] * 6  # 2 (X - 1) steps
    compiled_collectives.assert_ring_collectives(ring, x, max_elements=2 * 16)
    with pytest.raises(WrongResult, match="compiles to all-reduce"):
        compiled_collectives.assert_ring_collectives(psum, x)
    with pytest.raises(WrongResult, match="sends 32 elements in one collective-permute .*at most 16 elements"):
        compiled_collectives.assert_ring_collectives(ring, x, max_elements=16)
