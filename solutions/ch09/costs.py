"""What a collective costs along one axis of chips, from one link's bandwidth.

Every step of the schedule moves one chunk, nbytes / X, over each link it uses, and a
link moves link_bandwidth bytes a second each way: a step takes nbytes / (X * W), or
the hop latency when that is longer (a small array is latency-bound). The steps come
from the schedule: X - 1 one way or along a line, ceil((X - 1) / 2) both ways round a
ring. On a full ring used both ways the time tends to nbytes / (2 W), whatever X is
(How to Scale Your Model, part 3). An all-reduce is a reduce-scatter then an
all-gather: twice the time.
"""

import math


def collective_seconds(op: str, nbytes: float, axis_size: int, *, link_bandwidth: float | None,
                       bidirectional: bool = True, wraparound: bool = True,
                       hop_latency: float = 0.0) -> float:
    """Seconds for an all-gather, reduce-scatter or all-reduce of an nbytes array over axis_size chips."""
    if op not in ("all-gather", "reduce-scatter", "all-reduce"):
        raise ValueError(f"unknown collective {op!r}")
    if link_bandwidth is None:
        raise ValueError("link_bandwidth is None: no cited figure for this chip, and guessing one is not a model")
    if axis_size > 1 and not wraparound and not bidirectional:
        raise ValueError("one-way links without a wraparound: the last chip never reaches the first")
    if axis_size == 1:
        return 0.0
    if wraparound and bidirectional:
        steps = math.ceil((axis_size - 1) / 2)
    else:
        steps = axis_size - 1
    step = max(hop_latency, nbytes / axis_size / link_bandwidth)
    phases = 2 if op == "all-reduce" else 1
    return phases * steps * step
