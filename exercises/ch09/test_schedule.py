"""Graded tests for ch09.schedule: ring_schedule(op, ring_size, *, bidirectional, wraparound).

Graded on properties, by running the schedule (pytest_tpucourse.instruments.ici.schedule_problems):
every send on a link that exists, no link carrying two chunks one way in one step, an
all-gather's sender holding what it sends and every chip receiving every other chunk
exactly once, a reduce-scatter never counting a chip twice and leaving chip c with chunk
c summed over all chips, in X - 1 steps (one way, or along a line) or ceil((X - 1) / 2)
(both ways round a ring). Ring sizes are drawn, 1, 2, odd and even included.
"""

from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks
from pytest_tpucourse.instruments import ici

OPS = ("all-gather", "reduce-scatter")
LINKS = ((True, True), (False, True), (True, False))  # (bidirectional, wraparound)


@given(op=st.sampled_from(OPS), size=st.integers(1, 40), links=st.sampled_from(LINKS))
@example(op="all-gather", size=1, links=(True, True))
@example(op="all-gather", size=2, links=(True, True))
@example(op="all-gather", size=5, links=(True, True))  # odd: two hops each way
@example(op="all-gather", size=8, links=(True, True))  # even: one side one hop longer
@example(op="all-gather", size=4, links=(True, False))  # a line: the ends are 3 hops apart
@example(op="all-gather", size=6, links=(False, True))
@example(op="reduce-scatter", size=2, links=(False, True))
@example(op="reduce-scatter", size=7, links=(True, True))
@example(op="reduce-scatter", size=8, links=(True, True))
@example(op="reduce-scatter", size=5, links=(True, False))
@example(op="reduce-scatter", size=4, links=(False, True))
def test_schedule_properties(impl, op, size, links):
    bidirectional, wraparound = links
    fn = impl.schedule.ring_schedule
    schedule = fn(op, size, bidirectional=bidirectional, wraparound=wraparound)
    problems = ici.schedule_problems(op, size, schedule, bidirectional=bidirectional, wraparound=wraparound)
    if problems:
        shown = problems[:4] + ([f"... {len(problems) - 4} more"] if len(problems) > 4 else [])
        checks.fail(fn, f"{fn.display}: the {op} on {size} chips is wrong:\n    " + "\n    ".join(shown))


def test_a_line_used_one_way_is_refused(impl):
    checks.assert_rejects(impl.schedule.ring_schedule, ("all-gather", 4),
                          kwargs=dict(bidirectional=False, wraparound=False), error=ValueError)


def _runs_right(got, expected):
    """None when the schedule, run in the grader's process, has no problem."""
    op, size, bidirectional, wraparound = expected
    problems = ici.schedule_problems(op, size, got, bidirectional=bidirectional, wraparound=wraparound)
    return None if not problems else f"the {op} on {size} chips is wrong: {'; '.join(problems[:3])}"


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): collectives the grader draws, run in
    the grader's process."""
    cases = []
    for _ in range(4):
        op, size = str(rng.choice(OPS)), int(rng.integers(1, 41))
        bidirectional, wraparound = LINKS[int(rng.integers(len(LINKS)))]
        cases.append(checks.trusted.exact("ring_schedule", (op, size),
                                          kwargs=dict(bidirectional=bidirectional, wraparound=wraparound),
                                          expected=(op, size, bidirectional, wraparound), compare=_runs_right))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
