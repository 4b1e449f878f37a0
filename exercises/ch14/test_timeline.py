"""Graded tests for ch14.timeline: simulate(programs), then the pair_exchange kernel it diagnoses."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, references, ir, tpu
from pytest_tpucourse.instruments import semaphore_timeline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.instruments.semaphore_timeline import DmaStart, DmaWait, Signal, Wait

pytestmark = [
    pytest.mark.kernel_timeout(30),
    # Meshes of up to 8 devices, and DMA execution orders and races between devices under TPU interpret
    # mode: on a TPU host with fewer chips every test here runs on 8 CPU devices (grading/placement.py).
    pytest.mark.devices(8),
    pytest.mark.host_interpret("DMA execution orders and races between devices"),
]


def _schedule_text(programs) -> str:
    return "\n".join(f"    device {d}: " + ", ".join(semaphore_timeline.label(op) for op in ops)
                     for d, ops in enumerate(programs))


def check_simulation(impl, programs, what):
    """The learner's simulate() against the course's, field by field (the course's is withheld
    while the learner's runs)."""
    expected = semaphore_timeline.run(programs)
    fn = impl.timeline.simulate
    with semaphore_timeline.withheld():
        got = fn(programs)
    note = f"the programs of {what}:\n{_schedule_text(programs)}"
    checks.assert_equal(type(got).__name__, "Timeline", fn=fn, what="the type of what it returned "
                        "(a pytest_tpucourse.instruments.semaphore_timeline.Timeline)", note=note)
    checks.assert_equal(len(got.rounds), len(expected.rounds), fn=fn, what="the number of devices in rounds",
                        note=note)
    for device, right in enumerate(expected.rounds):
        checks.assert_equal(tuple(got.rounds[device]), right, fn=fn,
                            what=f"the rounds in which device {device} ran its operations", note=note)
    checks.assert_equal(got.deadlock, expected.deadlock, fn=fn, what="the deadlock", note=note)
    checks.assert_equal(tuple(got.leftover), expected.leftover, fn=fn,
                        what="what is left on the semaphores", note=note)


@pytest.mark.parametrize("name", sorted(semaphore_timeline.SCHEDULES))
@pytest.mark.parametrize("devices", [2, 4])
def test_simulate_the_shipped_schedules(impl, name, devices):
    """Ring permute, all-gather, collective matmul; the deadlocks of the pair exchange, of a
    wait for two signals, of a wait on the next step's semaphore; a copy never waited for."""
    check_simulation(impl, semaphore_timeline.SCHEDULES[name](devices), f"the shipped schedule {name!r}, {devices} devices")


# Each rule of the README's semantics, alone.
RULES = {
    "a signal is seen from the next round on": [[Signal("a"), Wait("a")]],
    "a wait takes what it waits for": [[Signal("a", 1), Signal("a", 1)], [Wait("a"), Wait("a"), Wait("a")]],
    "a wait for two needs two": [[Signal("a", 1, inc=2)], [Wait("a", 2), Wait("a")]],
    "a blocked device retries every round": [[Signal("x"), Signal("x"), Signal("a", 1)], [Wait("a")]],
    "a copy lands on both ends": [[DmaStart(1, "send", "recv"), DmaWait("send")], [DmaWait("recv")]],
    "a copy to oneself": [[DmaStart(0, "s", "r"), DmaWait("r"), DmaWait("s")]],
    "a copy to oneself on one semaphore lands on it twice": [[DmaStart(0, "a", "a"), DmaWait("a"), DmaWait("a")]],
    "the lowest blocked device is the deadlock": [[Signal("a", 2)], [Wait("b")], [Wait("a"), Wait("a")]],
    "leftovers after a finished run": [[Signal("a", 1, inc=3), Wait("b")], [Wait("a"), Signal("b", 0)]],
    "an empty program": [[], [Signal("a", 0)]],
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_simulate_follows_each_rule(impl, rule):
    check_simulation(impl, RULES[rule], rule)


@st.composite
def schedules(draw):
    """2-4 devices, up to 6 operations each, two semaphore names: finished runs and deadlocks."""
    n = draw(st.integers(2, 4))
    sems, devices = st.sampled_from(("a", "b")), st.integers(0, n - 1)
    op = st.one_of(st.builds(Signal, sems, st.one_of(st.none(), devices), st.integers(1, 2)),
                   st.builds(Wait, sems, st.integers(1, 2)),
                   st.builds(DmaStart, devices, sems, sems),
                   st.builds(DmaWait, sems))
    return [draw(st.lists(op, max_size=6)) for _ in range(n)]


@given(programs=schedules())
@example(programs=[[Signal("a", 1), Wait("b")], [Wait("a"), Signal("b", 0), DmaStart(0, "a", "b")]])
def test_simulate_random_schedules(impl, programs):
    check_simulation(impl, programs, "a drawn schedule")


def test_simulate_rejects_a_device_outside_the_schedule(impl):
    programs = [[Signal("a", 5)], [Wait("a")]]
    checks.assert_rejects(impl.timeline.simulate, (programs,), error=ValueError, mentions=("5",))



def test_pair_exchange_predicted_then_fixed(impl, mesh):
    """Predict, then fix: your simulate() must find the shipped exchange's deadlock; then your
    pair_exchange() must equal ppermute with pairs (0, 1), (2, 3), ..., in both DMA execution
    modes, move its data by remote DMA and have no race."""
    check_simulation(impl, semaphore_timeline.exchange_deadlock(4), "the shipped pair exchange, 4 devices")
    kwargs = dict(mesh=mesh(8, axis="ring"), axis_name="ring")  # an axis not named "x": axis_name is used
    x = tst.random_array((64, 128), "float32", 0)
    fn = impl.timeline.pair_exchange
    tpu.assert_correct_in_each_dma_mode(fn, lambda: checks.assert_matches_reference(
        fn, (x,), kwargs=kwargs, reference=references.PAIR_EXCHANGE.bind(**kwargs)))
    ir.assert_communicates_by_remote_dma(fn, x, **kwargs)
    tpu.assert_no_races(fn, x, cores=1, why=tpu.RACE_BETWEEN_DEVICES, **kwargs)


OPS = {"signal": Signal, "wait": Wait, "dma_start": DmaStart, "dma_wait": DmaWait}


def _programs(spec):
    """The programs of a drawn schedule: per device, (operation, its fields) pairs."""
    return [[OPS[kind](*fields) for kind, fields in device] for device in spec]


def _timeline(simulate, programs):
    """What simulate() returned, as plain data (the course's simulation withheld while it runs)."""
    with semaphore_timeline.withheld():
        got = simulate(programs)
    return _timeline_fields(got)


def _timeline_fields(timeline):
    return {"type": type(timeline).__name__, "rounds": [tuple(r) for r in timeline.rounds],
            "deadlock": timeline.deadlock, "leftover": tuple(timeline.leftover)}


def _draw_schedule(rng):
    n = int(rng.integers(2, 5))
    sems = ("a", "b")

    def op():
        kind = str(rng.choice(sorted(OPS)))
        if kind == "signal":
            target = None if rng.integers(2) else int(rng.integers(n))
            return kind, (str(rng.choice(sems)), target, int(rng.integers(1, 3)))
        if kind == "wait":
            return kind, (str(rng.choice(sems)), int(rng.integers(1, 3)))
        if kind == "dma_start":
            return kind, (int(rng.integers(n)), str(rng.choice(sems)), str(rng.choice(sems)))
        return kind, (str(rng.choice(sems)),)
    return [[op() for _ in range(int(rng.integers(0, 7)))] for _ in range(n)]


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): schedules the grader draws, simulated
    by the course in the grader's process, and the pair exchange on eight devices."""
    cases = []
    for _ in range(3):
        spec = _draw_schedule(rng)
        cases.append(checks.trusted.exact(
            "simulate", (checks.trusted.built(_programs, spec, label=f"a drawn schedule of {len(spec)} devices"),),
            through=_timeline, expected=lambda programs: _timeline_fields(semaphore_timeline.run(programs)),
            what="the timeline"))
    kwargs = dict(mesh=checks.trusted.mesh(8), axis_name="x")
    cases.append(checks.trusted.values("pair_exchange", (tst.random_array((64, 128), "float32",
                                                                         checks.trusted.seed(rng)),),
                                       kwargs=kwargs, reference=references.PAIR_EXCHANGE.bind(**kwargs)))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
