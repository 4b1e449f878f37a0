"""Graded tests for ch09.costs: collective_seconds(op, nbytes, axis_size, *, link_bandwidth,
bidirectional, wraparound, hop_latency).

First the worked numbers of How to Scale Your Model (part 3, "Sharded Matrices"), with
the book's own inputs; then drawn collectives on every chip with a cited link figure
(the course's registry), against the package's model (pytest_tpucourse.instruments.ici). A chip
without a cited figure must raise, never guess.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, chips
from pytest_tpucourse.instruments import ici

V5E_LINK = chips.get_chip("v5e").ici_link_bandwidth  # 4.5e10 B/s one way
V4_LINK = chips.get_chip("v4").ici_link_bandwidth
CITED = [chips.get_chip(n) for n in chips.TPU_CHIPS if chips.get_chip(n).ici_link_bandwidth is not None]

# (what the book computes, arguments, the book's answer in seconds)
BOOK = [
    ("pop quiz 2 (1): all-gather of 34e6 bytes over Y=4, full ring both ways: 34e6 / 9e10",
     ("all-gather", 34e6, 4, dict(link_bandwidth=V5E_LINK)), 34e6 / 9e10),
    ("pop quiz 2 (1): v5e's axis of 4 has no wraparound: 3 hops of 8.4e6 bytes at 4.5e10",
     ("all-gather", 4 * 8.4e6, 4, dict(link_bandwidth=V5E_LINK, wraparound=False)), 3 * 8.4e6 / 4.5e10),
    ("pop quiz 2 (2): 32 kB shards are latency-bound: 3 hops of about 1 us",
     ("all-gather", 4 * 64 * 256 * 2, 4, dict(link_bandwidth=V5E_LINK, wraparound=False, hop_latency=1e-6)),
     3e-6),
    ("Question 2, part 1: all-gather of 2BD/Y bytes on a v4p 4x4x4 cube (wraparound): 2*1024*4096 / (9e10*4)",
     ("all-gather", 2 * 1024 * 4096 / 4, 4, dict(link_bandwidth=V4_LINK)), 2 * 1024 * 4096 / (9e10 * 4)),
    ("an all-reduce is a reduce-scatter and an all-gather: 2 V / W_ici",
     ("all-reduce", 34e6, 16, dict(link_bandwidth=V5E_LINK)), 2 * 34e6 / 9e10),
]


@pytest.mark.parametrize("what, call, book", BOOK,
                         ids=["quiz2-ring", "quiz2-line", "quiz2-latency", "question2-v4p", "all-reduce"])
def test_the_scaling_books_worked_numbers(impl, what, call, book):
    op, nbytes, size, kwargs = call
    fn = impl.costs.collective_seconds
    got = fn(op, nbytes, size, **kwargs)
    checks.assert_close(np.float64(got) if isinstance(got, (int, float)) else got, book, fn=fn,
                        dtype="float64", what=f"seconds ({what})")


@given(chip=st.sampled_from(CITED), op=st.sampled_from(ici.OPS), size=st.integers(1, 64),
       nbytes=st.floats(1e3, 1e11), links=st.sampled_from([(True, True), (False, True), (True, False)]),
       latency=st.sampled_from([0.0, 1e-6]))
@example(chip=chips.get_chip("v6e"), op="all-gather", size=5, nbytes=1e9, links=(True, True), latency=0.0)
@example(chip=chips.get_chip("v6e"), op="reduce-scatter", size=2, nbytes=1e9, links=(True, True), latency=0.0)
@example(chip=chips.get_chip("v5e"), op="all-reduce", size=1, nbytes=1e9, links=(True, True), latency=1e-6)
@example(chip=chips.get_chip("v5p"), op="all-reduce", size=8, nbytes=1e9, links=(False, True), latency=0.0)
def test_drawn_collectives(impl, chip, op, size, nbytes, links, latency):
    bidirectional, wraparound = links
    kwargs = dict(link_bandwidth=chip.ici_link_bandwidth, bidirectional=bidirectional,
                  wraparound=wraparound, hop_latency=latency)
    fn = impl.costs.collective_seconds
    got = fn(op, nbytes, size, **kwargs)
    want = ici.seconds(op, nbytes, size, **kwargs)
    checks.assert_close(np.float64(got) if isinstance(got, (int, float)) else got, want, fn=fn,
                        dtype="float64", what=f"seconds of the {op} on {size} {chip.name} chips")


def test_a_chip_without_a_cited_figure_raises(impl):
    v2 = chips.get_chip("v2")
    assert v2.ici_link_bandwidth is None  # no source gives v2's per-link figure
    checks.assert_rejects(impl.costs.collective_seconds, ("all-gather", 1e9, 4),
                          kwargs=dict(link_bandwidth=v2.ici_link_bandwidth), error=ValueError,
                          note="a v2, whose per-link figure no source gives")


def test_one_way_links_without_a_wraparound_raise(impl):
    checks.assert_rejects(impl.costs.collective_seconds, ("all-gather", 1e9, 4),
                          kwargs=dict(link_bandwidth=V5E_LINK, bidirectional=False, wraparound=False),
                          error=ValueError)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): collectives the grader draws, against
    the course's model."""
    cases = []
    for _ in range(4):
        chip = CITED[int(rng.integers(len(CITED)))]
        op, size, nbytes = str(rng.choice(ici.OPS)), int(rng.integers(1, 65)), float(10 ** rng.uniform(3, 11))
        bidirectional, wraparound = [(True, True), (False, True), (True, False)][int(rng.integers(3))]
        kwargs = dict(link_bandwidth=chip.ici_link_bandwidth, bidirectional=bidirectional, wraparound=wraparound,
                      hop_latency=float(rng.choice([0.0, 1e-6])))
        cases.append(checks.trusted.exact("collective_seconds", (op, nbytes, size), kwargs=kwargs,
                                          expected=ici.seconds(op, nbytes, size, **kwargs),
                                          compare=checks.trusted.close(rtol=1e-9)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
