"""The semaphore timeline: the course's simulator, its shipped schedules and `tpucourse timeline`."""

import textwrap

import pytest

from pytest_tpucourse.commands import main
from pytest_tpucourse.instruments import semaphore_timeline
from pytest_tpucourse.instruments.semaphore_timeline import (
    Deadlock,
    DmaStart,
    DmaWait,
    Signal,
    Wait,
)


def test_a_ring_permute_finishes_in_five_rounds():
    result = semaphore_timeline.run(semaphore_timeline.permute(3))
    assert result.finished and result.leftover == ()
    assert result.rounds == ((0, 1, 2, 3, 4),) * 3


@pytest.mark.parametrize("name, deadlock", [
    ("exchange-deadlock", Deadlock(device=0, step=0, sem="barrier", wants=1, holds=0)),
    ("wait-for-two", Deadlock(device=0, step=1, sem="barrier", wants=2, holds=1)),
    ("next-step-semaphore", Deadlock(device=0, step=4, sem="recv[1]", wants=1, holds=0)),
])
def test_the_shipped_deadlocks_name_the_first_hopeless_wait(name, deadlock):
    for devices in (2, 4, 8):
        assert semaphore_timeline.run(semaphore_timeline.SCHEDULES[name](devices)).deadlock == deadlock


@pytest.mark.parametrize("name, devices", [
    (name, devices) for name in ("permute", "exchange", "all-gather", "collective-matmul")
    for devices in (2, 3, 4, 8) if name != "exchange" or devices % 2 == 0])  # pairs need an even ring
def test_the_shipped_kernels_finish_with_every_semaphore_at_zero(name, devices):
    result = semaphore_timeline.run(semaphore_timeline.SCHEDULES[name](devices))
    assert result.finished and result.leftover == ()


def test_a_copy_never_waited_for_finishes_with_its_semaphore_left_over():
    result = semaphore_timeline.run(semaphore_timeline.missing_wait(2))
    assert result.finished and result.leftover == ((0, "send", 1), (1, "send", 1))


def test_rules_one_by_one():
    # a signal is visible from the next round; a wait takes what it waited for
    assert semaphore_timeline.run([[Signal("a"), Wait("a")]]).rounds == ((0, 1),)
    blocked = semaphore_timeline.run([[Signal("a", 1)], [Wait("a"), Wait("a")]])
    assert blocked.rounds == ((0,), (1,)) and blocked.deadlock == Deadlock(1, 1, "a", 1, 0)
    # a copy adds one to the sender's and one to the receiver's semaphore
    copy = semaphore_timeline.run([[DmaStart(1, "s", "r"), DmaWait("s")], [DmaWait("r")]])
    assert copy.rounds == ((0, 1), (1,)) and copy.finished


def test_a_device_outside_the_schedule_is_refused():
    with pytest.raises(ValueError, match="addresses device 5, but the schedule has devices 0-1"):
        semaphore_timeline.run([[Signal("a", 5)], []])


def test_withheld_while_a_learners_simulator_is_graded():
    with semaphore_timeline.withheld(), pytest.raises(semaphore_timeline.Withheld, match="withheld while your simulate"):
        semaphore_timeline.run([[]])
    assert semaphore_timeline.run([[]]).finished


def test_the_command_marks_the_deadlock_and_fails(capsys):
    assert main.main(["timeline", "exchange-deadlock", "--devices", "2"]) == 1
    out = capsys.readouterr().out
    assert "round  device 0        device 1" in out
    assert "0      ✗ wait barrier  ✗ wait barrier" in out
    assert "DEADLOCK: device 0 is stuck at step 0 waiting for barrier to hold 1; it holds 0" in out


def test_the_command_renders_a_finished_schedule(capsys):
    assert main.main(["timeline", "permute", "--devices", "2"]) == 0
    out = capsys.readouterr().out
    assert "2      dma → 1 (send, recv)  dma → 0 (send, recv)" in out and "finished in 5 rounds." in out


def test_the_command_lists_the_shipped_schedules(capsys):
    assert main.main(["timeline", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in semaphore_timeline.SCHEDULES)


def test_the_command_renders_your_own_schedule(capsys, tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text(textwrap.dedent("""
        from pytest_tpucourse.instruments.semaphore_timeline import Signal, Wait

        def handshake(n):
            return [[Wait("barrier"), Signal("barrier", (d + 1) % n)] for d in range(n)]

        FIXED = [[Signal("barrier", 1), Wait("barrier")], [Signal("barrier", 0), Wait("barrier")]]
    """))
    assert main.main(["timeline", f"{mine}:handshake", "--devices", "3"]) == 1
    assert "DEADLOCK: device 0" in capsys.readouterr().out
    assert main.main(["timeline", f"{mine}:FIXED"]) == 0
    assert "finished in 2 rounds." in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["timeline", "nope"], "no shipped schedule 'nope'"),
    (["timeline", "missing.py:X"], "missing.py does not exist"),
    (["timeline", "exchange", "--devices", "3"], "needs an even number of devices, got 3"),
])
def test_the_command_says_what_is_wrong(capsys, argv, message):
    assert main.main(argv) == 2
    assert message in capsys.readouterr().err
