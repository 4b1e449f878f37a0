"""The semaphore timeline: a distributed kernel's schedule, simulated round by round.

A schedule is one list of operations per device, in program order, modelled on
what a Pallas TPU kernel does with semaphores:

  Signal(sem, device=None, inc=1)  pl.semaphore_signal(sem, inc, device_id=device):
                                   add `inc` to semaphore `sem` of `device` (None: this one)
  Wait(sem, value=1)               pl.semaphore_wait(sem, value): block until this
                                   device's `sem` holds at least `value`, then take it
  DmaStart(device, send, recv)     make_async_remote_copy(..., send_sem, recv_sem,
                                   device_id=device).start(): when the copy lands, this
                                   device's `send` and `device`'s `recv` each gain 1
  DmaWait(sem)                     .wait_send() / .wait_recv(): block until this device's
                                   `sem` holds a landed copy (1), then take it

`run(programs)` plays them in rounds. In every round each device that has
operations left tries its next one: a Signal or DmaStart always runs, a Wait or
DmaWait runs if the semaphore held enough when the round began. What a Signal adds,
and what a DmaStart's copy adds, becomes visible at the start of the next round. A
device whose wait cannot run stays on it and tries again next round. The schedule
ends when every device has run everything; it deadlocks in the first round in which
no device can run anything while some still have operations left: from then on
nothing can change. The result is a `Timeline`: the round of every operation that
ran, the deadlock (the blocked wait of the lowest-numbered blocked device) if any,
and every semaphore left non-zero at the end (a signal or a copy nobody waited for,
which a TPU reports as an error at the end of the kernel).

Counting copies as 1 is the TPU's byte counting when every copy a wait is meant for
has the same size, which holds for the course's kernels.

This module is the instrument behind `tpucourse timeline` (the shipped schedules are
in SCHEDULES); chapter 14 has the learner write the same simulator, and while the
learner's is graded, `run` here is withheld.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Signal:
    sem: str
    device: int | None = None  # None: this device
    inc: int = 1


@dataclass(frozen=True)
class Wait:
    sem: str
    value: int = 1


@dataclass(frozen=True)
class DmaStart:
    device: int
    send: str
    recv: str


@dataclass(frozen=True)
class DmaWait:
    sem: str


OPS = (Signal, Wait, DmaStart, DmaWait)


@dataclass(frozen=True)
class Deadlock:
    """The first wait that can never be satisfied: the blocked lowest-numbered device's."""

    device: int
    step: int  # the index of the blocked operation in that device's program
    sem: str
    wants: int
    holds: int


@dataclass(frozen=True)
class Timeline:
    rounds: tuple[tuple[int, ...], ...]  # rounds[d][i]: the round device d ran its operation i
    deadlock: Deadlock | None = None
    leftover: tuple[tuple[int, str, int], ...] = ()  # (device, sem, count) non-zero at the end

    @property
    def finished(self) -> bool:
        return self.deadlock is None


class Withheld(RuntimeError):
    """The course's simulator was called while a learner's simulator is being graded."""


_withheld = False


class withheld:
    """Within the block, `run` refuses: the learner's simulate() must not call the course's."""

    def __enter__(self):
        global _withheld
        _withheld = True

    def __exit__(self, *exc):
        global _withheld
        _withheld = False


def run(programs) -> Timeline:
    """Simulate a schedule (one list of operations per device) round by round."""
    if _withheld:
        raise Withheld("the course's own simulator (pytest_tpucourse.instruments.semaphore_timeline.run) is withheld "
                       "while your simulate() is graded: the exercise is to write it")
    programs = [list(ops) for ops in programs]
    _validate(programs)
    counts: dict[tuple[int, str], int] = {}
    position = [0] * len(programs)
    rounds: list[list[int]] = [[] for _ in programs]
    now = 0
    while any(position[d] < len(ops) for d, ops in enumerate(programs)):
        landing: list[tuple[int, str, int]] = []
        ran = False
        for device, ops in enumerate(programs):
            if position[device] == len(ops):
                continue
            op = ops[position[device]]
            if isinstance(op, (Wait, DmaWait)):
                need = op.value if isinstance(op, Wait) else 1
                if counts.get((device, op.sem), 0) < need:
                    continue
                counts[(device, op.sem)] -= need
            elif isinstance(op, Signal):
                landing.append((device if op.device is None else op.device, op.sem, op.inc))
            else:
                landing += [(device, op.send, 1), (op.device, op.recv, 1)]
            rounds[device].append(now)
            position[device] += 1
            ran = True
        if not ran:
            return Timeline(_frozen(rounds), _first_blocked(programs, position, counts), _leftover(counts))
        for device, sem, inc in landing:
            counts[(device, sem)] = counts.get((device, sem), 0) + inc
        now += 1
    return Timeline(_frozen(rounds), None, _leftover(counts))


def _validate(programs) -> None:
    for device, ops in enumerate(programs):
        for step, op in enumerate(ops):
            if not isinstance(op, OPS):
                raise ValueError(f"device {device} step {step}: {op!r} is not a Signal, Wait, DmaStart "
                                 f"or DmaWait")
            target = getattr(op, "device", None)
            if target is not None and not 0 <= target < len(programs):
                raise ValueError(f"device {device} step {step}: {op} addresses device {target}, but the "
                                 f"schedule has devices 0-{len(programs) - 1}")


def _first_blocked(programs, position, counts) -> Deadlock:
    for device, ops in enumerate(programs):
        if position[device] < len(ops):
            op = ops[position[device]]
            wants = op.value if isinstance(op, Wait) else 1
            return Deadlock(device, position[device], op.sem, wants, counts.get((device, op.sem), 0))
    raise AssertionError("no device is blocked")


def _leftover(counts) -> tuple[tuple[int, str, int], ...]:
    return tuple(sorted((d, sem, n) for (d, sem), n in counts.items() if n))


def _frozen(rounds) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(r) for r in rounds)


# ---------------------------------------------------------------- shipped schedules
#
# Each takes the number of devices and returns one program per device. They follow
# the kernels of chapter 14 (barrier handshake first, then the copies).


def _right(d, n):
    return (d + 1) % n


def _left(d, n):
    return (d - 1) % n


def handshake(d, n):
    """Tell the left neighbour (who sends to me) I am in the kernel; wait for the right one's word."""
    return [Signal("barrier", _left(d, n)), Wait("barrier")]


def permute(n):
    """Ring permute: one copy to the right neighbour."""
    return [handshake(d, n) + [DmaStart(_right(d, n), "send", "recv"), DmaWait("send"), DmaWait("recv")]
            for d in range(n)]


def exchange_deadlock(n):
    """Pairs (0, 1), (2, 3), ... swap shards; each waits for its partner's word before giving its own."""
    return [[Wait("barrier"), Signal("barrier", d ^ 1), DmaStart(d ^ 1, "send", "recv"), DmaWait("send"),
             DmaWait("recv")] for d in range(_even(n))]


def exchange(n):
    """The pair exchange, fixed: signal first, then wait."""
    return [[Signal("barrier", d ^ 1), Wait("barrier"), DmaStart(d ^ 1, "send", "recv"), DmaWait("send"),
             DmaWait("recv")] for d in range(_even(n))]


def wait_for_two(n):
    """A ring permute whose barrier waits for two signals when only one is sent."""
    return [[Signal("barrier", _left(d, n)), Wait("barrier", 2), DmaStart(_right(d, n), "send", "recv"),
             DmaWait("send"), DmaWait("recv")] for d in range(n)]


def all_gather(n):
    """Ring all-gather, one send and one receive semaphore per step."""
    return [handshake(d, n) + [op for s in range(n - 1) for op in
                               (DmaStart(_right(d, n), f"send[{s}]", f"recv[{s}]"), DmaWait(f"send[{s}]"),
                                DmaWait(f"recv[{s}]"))] for d in range(n)]


def next_step_semaphore(n):
    """The all-gather whose step s waits on step s + 1's receive semaphore."""
    return [handshake(d, n) + [op for s in range(n - 1) for op in
                               (DmaStart(_right(d, n), f"send[{s}]", f"recv[{s}]"), DmaWait(f"send[{s}]"),
                                DmaWait(f"recv[{s + 1}]"))] for d in range(n)]


def missing_wait(n):
    """A ring permute that never waits for its send: it finishes, with the send semaphore left at 1."""
    return [handshake(d, n) + [DmaStart(_right(d, n), "send", "recv"), DmaWait("recv")] for d in range(n)]


def collective_matmul(n):
    """All-gather matmul on two buffers: a credit from the right neighbour before every send but the first."""
    programs = []
    for d in range(n):
        ops = handshake(d, n)
        for s in range(n - 1):
            held, other = s % 2, 1 - s % 2
            if s > 0:
                ops.append(Wait("credit"))
            ops += [DmaStart(_right(d, n), f"send[{held}]", f"recv[{other}]"),
                    DmaWait(f"send[{held}]"), DmaWait(f"recv[{other}]")]
            if s < n - 2:
                ops.append(Signal("credit", _left(d, n)))
        programs.append(ops)
    return programs


SCHEDULES = {
    "permute": permute,
    "exchange-deadlock": exchange_deadlock,
    "exchange": exchange,
    "wait-for-two": wait_for_two,
    "all-gather": all_gather,
    "next-step-semaphore": next_step_semaphore,
    "missing-wait": missing_wait,
    "collective-matmul": collective_matmul,
}


def _even(n):
    if n % 2:
        raise ValueError(f"the pair exchange needs an even number of devices, got {n}")
    return n


# ---------------------------------------------------------------- rendering


def label(op) -> str:
    """A short name for one operation: 'signal barrier → 3', 'wait recv[0]', 'dma → 1'."""
    if isinstance(op, Signal):
        where = "" if op.device is None else f" → {op.device}"
        return f"signal {op.sem}{'' if op.inc == 1 else f' +{op.inc}'}{where}"
    if isinstance(op, Wait):
        return f"wait {op.sem}{'' if op.value == 1 else f' ≥{op.value}'}"
    if isinstance(op, DmaStart):
        return f"dma → {op.device} ({op.send}, {op.recv})"
    return f"dma wait {op.sem}"


def render(programs, timeline: Timeline) -> str:
    """The schedule as a text table: one row per round, one column per device."""
    programs = [list(ops) for ops in programs]
    last = max((r[-1] for r in timeline.rounds if r), default=-1)
    end = last + 1 if timeline.deadlock is not None else last
    cells = [[""] * len(programs) for _ in range(end + 1)]
    for device, ops in enumerate(programs):
        ran = timeline.rounds[device]
        for step, when in enumerate(ran):
            cells[when][device] = label(ops[step])
        blocked_from = ran[-1] + 1 if ran else 0
        if len(ran) < len(ops):
            for when in range(blocked_from, end + 1):
                cells[when][device] = f"✗ {label(ops[len(ran)])}" if when == end else "⋮ waiting"
        else:
            for when in range(blocked_from, end + 1):
                cells[when][device] = "·"
    header = ["round"] + [f"device {d}" for d in range(len(programs))]
    rows = [header] + [[str(r)] + row for r, row in enumerate(cells)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.append("")
    lines.append(summary(timeline))
    return "\n".join(lines)


def summary(timeline: Timeline) -> str:
    if timeline.deadlock is not None:
        d = timeline.deadlock
        text = (f"DEADLOCK: device {d.device} is stuck at step {d.step} waiting for {d.sem} to hold "
                f"{d.wants}; it holds {d.holds}, and no device can run anything any more.")
    else:
        rounds = 1 + max((r[-1] for r in timeline.rounds if r), default=-1)
        text = f"finished in {rounds} rounds."
    if timeline.leftover:
        left = ", ".join(f"{sem} = {n} on device {d}" for d, sem, n in timeline.leftover)
        text += f"\nleft non-zero at the end (a signal or copy never waited for): {left}"
    return text


# ---------------------------------------------------------------- schedules by name


def load_schedule(name: str, devices: int):
    """A shipped schedule by name, or 'path/to/file.py:NAME' (a list of programs, or a function of n)."""
    if name in SCHEDULES:
        return SCHEDULES[name](devices)
    path, _, attribute = name.partition(":")
    if not path.endswith(".py") or not attribute:
        raise ValueError(f"no shipped schedule {name!r} (shipped: {', '.join(SCHEDULES)}); for your own "
                         f"give FILE.py:NAME")
    if not Path(path).is_file():
        raise ValueError(f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(f"_tpucourse_timeline_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    schedule = getattr(module, attribute, None)
    if schedule is None:
        raise ValueError(f"{path} has no {attribute}")
    return schedule(devices) if callable(schedule) else schedule
