"""What one sync per call adds to a small op's time, next to the gate harness: docs/gates.md.

    python bench/harness_dispatch.py

Times a jitted float32 add of two 256x256 arrays on this machine's CPU two ways: each call
followed by its own block_until_ready (300 calls, the median), and the gate harness
(gates/timer.py: N calls per sync, the empty-call sample taken off, rounds until the
interval is tight). A CPU's numbers say nothing about a TPU; what they show is how much of a
one-sync-per-call time is dispatch and the sync rather than the op.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

from pytest_tpucourse.gates import timer


def main() -> None:
    add = jax.jit(lambda x, y: x + y)
    input_sets = [(jnp.full((256, 256), float(seed), jnp.float32),) * 2 for seed in range(3)]
    for args in input_sets:
        add(*args).block_until_ready()
    one_sync_each = []
    for i in range(300):
        start = time.perf_counter()
        add(*input_sets[i % 3]).block_until_ready()
        one_sync_each.append(time.perf_counter() - start)
    print(f"one sync per call, 300 calls: median {statistics.median(one_sync_each) * 1e6:.1f} us per call")
    timing = timer.Harness().measure({"add": add}, input_sets)["add"]
    print(f"gate harness: median {timing.summary.median * 1e6:.1f} us per call ({timing.describe()}; "
          f"an empty call dispatches in {timing.dispatch * 1e6:.2f} us)")


if __name__ == "__main__":
    main()
