"""Exercise ch09.costs: a collective's time from link bandwidth (README: "What a collective costs")."""


def collective_seconds(op: str, nbytes: float, axis_size: int, *, link_bandwidth: float | None,
                       bidirectional: bool = True, wraparound: bool = True,
                       hop_latency: float = 0.0) -> float:
    """Seconds for a collective of an nbytes array along one mesh axis of axis_size chips.

    op: "all-gather" (nbytes: the gathered array), "reduce-scatter" (nbytes: the array
    each chip holds before) or "all-reduce". link_bandwidth: one link's one-way bytes/s.
    Each step moves one chunk of nbytes / axis_size over every link it uses and takes
    max(hop_latency, chunk / link_bandwidth). Raise ValueError for link_bandwidth None (no
    cited figure), for one-way links without a wraparound, and for an unknown op.
    """
    raise NotImplementedError("write collective_seconds(): steps of the schedule times one chunk's time")
