"""What TPU interpret mode is doing inside a graded call: its waits, its deadlocks, its mode.

A kernel that deadlocks under TPU interpret mode blocks one thread per simulated
device inside the interpreter's semaphore wait, forever (the wait polls every 0.1 s
for a failure flag and never gives up). `snapshot()` reads those threads' frames:
which device waits, on which kind of semaphore (the barrier semaphore, a DMA
semaphore, a scratch semaphore), for how much, what the semaphore holds, and, for DMA
waits, the kernel line that waits. `join_watching` waits for a graded call like
`Thread.join`, and returns early with the waits when they form a deadlock: every
device blocked on a semaphore that holds too little, with no queued DMA that could
add to it. Nothing can then ever signal, so the call is stopped at once instead of
at the deadline.

Private JAX API (jax 0.10.2, `JAX_VERSION`): the frames of
`jax._src.pallas.mosaic.interpret.interpret_pallas_call`'s `semaphore_wait`,
`dma_wait` and barrier callbacks, their local variables, the interpreter's
`_shared_memory` (semaphore counts and queued DMA tasks), and JAX's config holder of
the Pallas interpret mode. Every access is guarded: under another JAX version a
snapshot is empty and no deadlock is ever found (the deadline still applies).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

JAX_VERSION = "0.10.2"
_INTERPRETER_FILE = "interpret_pallas_call.py"
_WAITS = {"semaphore_wait", "dma_wait"}
POLL_SECONDS = 0.25
# A deadlock must look the same for this long before the call is stopped: a thread that
# is about to be signalled leaves its wait within the interpreter's 0.1 s poll.
STABLE_SECONDS = 1.0

FINISHED = "end-of-kernel barrier"
ENTERING = "entry barrier"  # waiting for every device to enter a kernel that has no barrier semaphore
BUSY = "running"  # inside another interpreter step (a load, a store, an allocation)
_BARRIERS = {"_barrier": ENTERING, "_clean_up_shared_memory": FINISHED}  # interpreter callback -> kind


@dataclass(frozen=True)
class BlockedWait:
    """One simulated device's thread, blocked in the interpreter."""

    device: int
    kind: str  # "barrier semaphore", "DMA semaphore", "semaphore", FINISHED, ENTERING or BUSY
    wants: int | None = None  # the count the wait needs (bytes, for a DMA semaphore)
    holds: int | None = None  # what the semaphore holds now
    where: str = ""  # the kernel's line, where the interpreter knows it (DMA waits)
    queued: int = 0  # DMAs queued on the semaphore that a wait would run (dma_execution_mode on_wait)

    @property
    def hopeless(self) -> bool:
        """Nothing this device can do alone will ever satisfy the wait."""
        return self.kind in (FINISHED, ENTERING) or (
            self.holds is not None and self.wants is not None and self.holds < self.wants
            and self.queued == 0)

    def describe(self) -> str:
        if self.kind == FINISHED:
            return "finished its kernel and waits for the other devices"
        if self.kind == ENTERING:
            return "waits for the other devices to enter the kernel"
        if self.kind == BUSY:
            return f"not waiting: busy in the interpreter's {self.where}"
        unit = " bytes" if self.kind == "DMA semaphore" else ""
        text = f"waits on a {self.kind} for {self.wants}{unit} (it holds {self.holds})"
        return text + (f" at {self.where}" if self.where else "")


def snapshot() -> list[BlockedWait]:
    """Every simulated device thread blocked in a TPU-interpret-mode wait now, by device."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        memory = interpreter._shared_memory
        frames = list(sys._current_frames().values())
    except Exception:  # another JAX version: nothing to say
        return []
    if memory is None:
        return []
    found = []
    for frame in frames:
        try:
            wait = _wait_in(frame, memory)
        except Exception:
            wait = None
        if wait is not None:
            found.append(wait)
    return sorted(found, key=lambda w: (w.device, w.kind, w.where))


def is_deadlock(waits: list[BlockedWait]) -> bool:
    """Every device of the running kernel blocked for good, and at least one not finished."""
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter
        memory = interpreter._shared_memory
        devices, cores = memory.num_devices, memory.num_cores_per_device
    except Exception:
        return False
    if cores != 1 or len(waits) != devices or {w.device for w in waits} != set(range(devices)):
        return False  # several cores per device share a device id: do not guess
    return all(w.hopeless for w in waits) and any(w.kind not in (FINISHED, ENTERING, BUSY) for w in waits)


def join_watching(thread, seconds: float) -> list[BlockedWait] | None:
    """Join `thread` for at most `seconds`; the waits of a deadlock found on the way, else None."""
    end = time.monotonic() + seconds
    candidate, since = None, 0.0
    while thread.is_alive():
        left = end - time.monotonic()
        if left <= 0:
            return None
        thread.join(min(POLL_SECONDS, left))
        if not thread.is_alive():
            return None
        waits = snapshot()
        if not is_deadlock(waits):
            candidate = None
        elif waits != candidate:
            candidate, since = waits, time.monotonic()
        elif time.monotonic() - since >= STABLE_SECONDS:
            return waits
    return None


def summary_lines(waits: list[BlockedWait], limit: int = 6) -> list[str]:
    """One line per distinct wait, devices with the same wait grouped: 'devices 0-3: waits ...'."""
    groups: dict[str, list[int]] = {}
    for wait in waits:
        groups.setdefault(wait.describe(), []).append(wait.device)
    lines = [f"{_devices(devices)}: {text}" for text, devices in
             sorted(groups.items(), key=lambda item: min(item[1]))]
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def interpret_setting():
    """The Pallas interpret setting in force in this thread: None (native), True (the generic
    interpreter) or a pltpu.InterpretParams (TPU interpret mode)."""
    from jax._src import config as jax_config

    return jax_config.pallas_tpu_interpret_mode_context_manager.value


def _wait_in(frame, memory) -> BlockedWait | None:
    """The interpreter wait this thread's stack is blocked in, if any."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_INTERPRETER_FILE):
            if code.co_name in _WAITS:
                return _semaphore_wait(frame.f_locals, memory, dma=code.co_name == "dma_wait")
            if code.co_name in _BARRIERS:  # they drop their device_id: read their wrapper's arguments
                caller = frame.f_back.f_locals.get("args", ()) if frame.f_back is not None else ()
                return BlockedWait(int(caller[1]), _BARRIERS[code.co_name]) if len(caller) > 1 else None
            if "device_id" in frame.f_locals:
                return BlockedWait(int(frame.f_locals["device_id"]), BUSY, where=code.co_name)
        frame = frame.f_back
    return None


def _semaphore_wait(variables, memory, *, dma: bool) -> BlockedWait:
    device, sem_id = int(variables["device_id"]), int(variables["sem_id"])
    core = memory.get_global_core_id(device, int(variables.get("local_core_id", 0)))
    wants = int(variables["size"] if dma else variables["value"])
    barrier = sem_id in memory.fixed_id_sem
    semaphore = memory.fixed_id_sem.get(sem_id) if barrier else memory.sem.get(sem_id)
    holds, queued = None, 0
    if semaphore is not None:
        holds, queued = int(semaphore.count_by_core[core]), len(semaphore.tasks[core])
    kind = "barrier semaphore" if barrier else "DMA semaphore" if dma else "semaphore"
    return BlockedWait(device, kind, wants, holds, _where(variables.get("source_info")), queued)


def _where(source_info) -> str:
    if source_info is None:
        return ""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(source_info)
    except Exception:
        return ""


def _devices(devices: list[int]) -> str:
    devices = sorted(set(devices))
    if len(devices) == 1:
        return f"device {devices[0]}"
    if devices == list(range(devices[0], devices[-1] + 1)):
        return f"devices {devices[0]}-{devices[-1]}"
    return "devices " + ", ".join(map(str, devices))


_LEFT_NONZERO = re.compile(r"Semaphore (\d+) has non-zero count for (\d+) \(global core \d+\) at kernel "
                           r"exit: (-?\d+)")
# The interpreter numbers the semaphores a kernel allocates from 2000 on; lower ids are the
# fixed ones, the barrier semaphores of collective kernels (their collective_id).
_FIRST_ALLOCATED_SEMAPHORE = 2000


def semaphores_left_nonzero(printed: str) -> str:
    """What TPU interpret mode printed about semaphores left non-zero at kernel exit, condensed:
    'the barrier semaphore = 1 on devices 0-7', or '' when it printed nothing of the kind."""
    found: dict[tuple[str, int], list[int]] = {}
    for sem, device, count in _LEFT_NONZERO.findall(printed):
        name = ("the barrier semaphore" if int(sem) < _FIRST_ALLOCATED_SEMAPHORE
                else f"scratch semaphore {int(sem) - _FIRST_ALLOCATED_SEMAPHORE}")
        found.setdefault((name, int(count)), []).append(int(device))
    return "; ".join(f"{name} = {count} on {_devices(devices)}"
                     for (name, count), devices in sorted(found.items()))
