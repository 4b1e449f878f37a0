"""The hop-by-hop schedule of a collective along one ring of chips (the EX·11 mesh).

Chip i starts an all-gather holding chunk i and ends it holding every chunk; in each
step every link carries at most one chunk each way. One way round a ring, chunk c
walks right one hop per step: X - 1 steps. Both ways, it walks right and left at once
and reaches everyone in ceil((X - 1) / 2) steps (on an even ring one side is one hop
longer: here the right). Without the wraparound link the chips form a line, and the
end chips are X - 1 hops apart whichever way the links are used.

A reduce-scatter runs the same paths backwards: chip c's chunk is summed on its way
towards chip c, the farthest contributor starting first, so every partial carries
everything behind it when it moves on.
"""


def ring_schedule(op: str, ring_size: int, *, bidirectional: bool = True,
                  wraparound: bool = True) -> list[list[tuple[int, int, int]]]:
    """Each step's sends (source, destination, chunk) for an all-gather or a reduce-scatter."""
    x = ring_size
    if op not in ("all-gather", "reduce-scatter"):
        raise ValueError(f"op must be 'all-gather' or 'reduce-scatter', got {op!r}")
    if x < 1:
        raise ValueError(f"a ring needs at least one chip, got {x}")
    if x > 1 and not wraparound and not bidirectional:
        raise ValueError("a line used one way cannot gather: the last chip never reaches the first")
    gather = op == "all-gather"
    if wraparound and not bidirectional:
        return [[(i, (i + 1) % x, (i - s) % x if gather else (i - s - 1) % x) for i in range(x)]
                for s in range(x - 1)]
    if wraparound:
        total = x // 2  # ceil((x - 1) / 2)
        right, left = total, x - 1 - total  # hops each way
        schedule = []
        for s in range(total):
            if gather:
                step = [(i, (i + 1) % x, (i - s) % x) for i in range(x)]
                step += [(i, (i - 1) % x, (i + s) % x) for i in range(x) if s < left]
            else:
                step = [(i, (i + 1) % x, (i + right - s) % x) for i in range(x)]
                step += [(i, (i - 1) % x, (i - (total - s)) % x) for i in range(x) if s >= total - left]
            schedule.append(step)
        return schedule
    schedule = []
    for s in range(x - 1):
        hops = s + 1 if gather else x - 1 - s  # how far the chunk is from where it started / ends
        rightward = [(i, i + 1, i - hops + 1 if gather else i + hops) for i in range(x - 1)]
        leftward = [(i, i - 1, i + hops - 1 if gather else i - hops) for i in range(1, x)]
        schedule.append([send for send in rightward + leftward if 0 <= send[2] < x])
    return schedule
