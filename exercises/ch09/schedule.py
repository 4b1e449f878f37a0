"""Exercise ch09.schedule: the mesh, hop by hop (README: "A collective, step by step")."""


def ring_schedule(op: str, ring_size: int, *, bidirectional: bool = True,
                  wraparound: bool = True) -> list[list[tuple[int, int, int]]]:
    """The steps of an all-gather or a reduce-scatter along one axis of ring_size chips.

    Returns one list per step of sends (source chip, destination chip, chunk), chips and
    chunks numbered 0..ring_size-1. All-gather: chip c starts with chunk c, every chip
    ends with every chunk. Reduce-scatter: every chip starts with a partial sum of every
    chunk; a send adds the sender's partial into the receiver's; chip c ends with chunk c
    summed over all chips. Links join neighbours i and i + 1, and ring_size - 1 to 0 when
    wraparound; bidirectional=False uses each link one way only (i -> i + 1). In a step a
    link carries at most one chunk each way. Use the fewest steps: ring_size - 1, or
    ceil((ring_size - 1) / 2) both ways round a ring. Raise ValueError for op not
    "all-gather" or "reduce-scatter", and for a line (no wraparound) used one way.
    """
    raise NotImplementedError("write ring_schedule(): at step s chip i sends chunk (i - s) % X to chip i + 1")
