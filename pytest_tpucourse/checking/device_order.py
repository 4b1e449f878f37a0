"""What a distributed kernel's signals and waits prove about the order of its copies, and the
devices they name.

TPU interpret mode runs one thread per simulated device, in whatever order the OS
schedules them, so a copy that can land too early shows in one run and hides in the
next. Judged instead: each device's own operations in program order (what it signalled,
waited for and copied: `jax_internals.recording_device_events`), which do not depend on
that schedule. Two orderings every ring kernel needs, read from them:

- The handshake. A remote copy into device e is safe only after e has entered the
  kernel; the barrier says so only if the barrier count I wait for cannot be made up
  without e's signal. With W the count I have waited for on my barrier semaphore before
  the copy, and S the signals all other devices send to my barrier in the whole kernel,
  the copy is covered when S < W (then e's signal was among those I took). A kernel
  that never touches the barrier semaphore relies on Pallas' default device barrier and
  is not judged here (readers/traced_program.assert_communicates_by_remote_dma checks that it has it).
- A receive semaphore used twice. Device d's two copies into device e's receive
  semaphore r count into one semaphore; e's wait for the first copy can be satisfied by
  the second's bytes unless d starts the second only after e waited for the first. That
  is proved when, between the two starts, d waits on a semaphore that e signals (towards
  d) after e's wait for the first copy: a credit, as chapter 14's collective matmul sends.
  A fresh semaphore per copy needs no proof.

Both are sufficient conditions read from the operations, not a model of every schedule:
an ordering proved through a third device is not seen, and is reported as missing.

Before either: every device a signal or a copy names must be one of the mesh's, 0 .. n-1
(`outside_the_mesh`). TPU interpret mode reads a negative id the way Python reads a list's
index (-1 is device n-1), so `lax.rem(me - 1, n)`, which is -1 on device 0, runs as if it were
right there; on a TPU an id outside the mesh names no device.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.jax_internals import DeviceEvent


def problems(events: list[DeviceEvent]) -> list[str]:
    """What the recorded operations fail to order, one line each, first kernel run first."""
    runs: dict[int, list[DeviceEvent]] = defaultdict(list)
    for event in events:
        runs[event.kernel].append(event)
    found = []
    for run in runs.values():
        by_device: dict[int, list[DeviceEvent]] = defaultdict(list)
        for event in run:
            by_device[event.device].append(event)
        found += _unguarded_first_copies(by_device) + _reused_receive_semaphores(by_device)
    return found


def outside_the_mesh(events: list[DeviceEvent]) -> list[tuple[DeviceEvent, str]]:
    """Each signal or copy that names a device the kernel run does not have, with its line, one
    per (kind of operation, device id), in the order they ran (device by device)."""
    found, seen = [], set()
    for e in sorted(events, key=lambda e: e.device):
        if e.op not in ("signal", "copy") or not e.devices or 0 <= e.peer < e.devices:
            continue
        what = ("signals the barrier semaphore of" if e.barrier else "signals a semaphore of") \
            if e.op == "signal" else "copies into"
        if (what, e.peer) in seen:
            continue
        seen.add((what, e.peer))
        found.append((e, f"device {e.device} {what} device {e.peer}{_at(e)}, and the mesh has devices "
                         f"0-{e.devices - 1}: {_wrapping(e.peer, e.devices)}"))
    return found


def _wrapping(peer: int, devices: int) -> str:
    """How a ring's neighbour is written so that it stays on the ring."""
    if peer >= devices:
        return "write the device k places to the right as lax.rem(me + k, n), so that it wraps to 0."
    fix = "write the device k places to the left as lax.rem(me + n - k, n)"
    if peer <= -devices:  # lax.rem gives neither: the id is not a remainder at all
        return f"lax.rem of a negative number is negative; {fix}."
    return (f"lax.rem of a negative number is negative (lax.rem({peer}, {devices}) == {peer}); {fix}. (TPU "
            f"interpret mode reads {peer} as device {peer % devices}, the way Python reads a list's index "
            f"{peer}; a TPU does not.)")


def _unguarded_first_copies(by_device) -> list[str]:
    if not any(e.barrier for events in by_device.values() for e in events):
        return []  # no barrier semaphore: Pallas' default device barrier, checked statically
    signals_to = defaultdict(lambda: defaultdict(int))  # target -> source -> increments
    for device, events in by_device.items():
        for e in events:
            if e.op == "signal" and e.barrier:
                signals_to[e.peer][device] += e.value
    found = []
    for device, events in sorted(by_device.items()):
        waited, judged = 0, set()
        for e in events:
            if e.op == "wait" and e.barrier:
                waited += e.value
            elif e.op == "copy" and e.peer != device and e.peer not in judged:
                judged.add(e.peer)
                others = {src: n for src, n in signals_to[device].items() if src != e.peer}
                if sum(others.values()) >= max(waited, 1):
                    sources = ", ".join(map(str, sorted(others))) or "no device"
                    found.append(
                        f"device {device}'s copy into device {e.peer}{_at(e)} can start before device "
                        f"{e.peer} has entered the kernel: before it, device {device} has waited for "
                        f"{waited} on its barrier semaphore, which the signals of device(s) {sources} "
                        f"make up without device {e.peer}'s (device {e.peer} "
                        f"{'signals it too, but is not needed' if signals_to[device].get(e.peer) else 'never signals it'}"
                        f"). Signal the barrier of the device that writes into you, and wait for as "
                        f"many signals as devices write into you.")
    return found


def _reused_receive_semaphores(by_device) -> list[str]:
    found = []
    for sender, events in sorted(by_device.items()):
        last = {}  # (destination, receive semaphore) -> (position in sender's program, copy number)
        counts = defaultdict(int)
        for position, e in enumerate(events):
            if e.op != "copy" or e.peer == sender:
                continue
            key = (e.peer, e.sem)
            counts[key] += 1
            if key in last:
                previous_position, number = last[key]
                if not _credited(by_device, sender, e.peer, e.sem, number,
                                 events[previous_position + 1:position]):
                    found.append(
                        f"device {sender} starts copy {number + 1} into device {e.peer}'s receive "
                        f"semaphore{_at(e)} while its copy {number} into the same semaphore may not "
                        f"have been waited for: nothing device {sender} waits on in between is "
                        f"signalled by device {e.peer} after that wait, so device {e.peer}'s wait for "
                        f"copy {number} can count copy {number + 1}'s bytes and return before its "
                        f"data landed. Give every copy in flight its own semaphore, or have the "
                        f"receiver send a credit the sender waits for.")
                    break
            last[key] = (position, counts[key])
    return found


def _credited(by_device, sender, receiver, sem, number, between) -> bool:
    """Whether `sender`, in `between`, waits on a semaphore that `receiver` signals towards it
    after the receiver's `number`-th wait on its receive semaphore `sem`."""
    waited_on = {e.sem for e in between if e.op == "wait"}
    if not waited_on:
        return False
    seen = 0
    for e in by_device.get(receiver, []):
        if e.op == "copy_wait" and e.sem == sem:
            seen += 1
        elif seen >= number and e.op == "signal" and e.peer == sender and e.sem in waited_on:
            return True
    return False


def _at(event: DeviceEvent) -> str:
    return f" (at {event.where})" if event.where else ""
