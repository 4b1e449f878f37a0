"""Collectives over ICI links: the hop-by-hop schedule on a ring and its roofline time.

A collective along one mesh axis of X chips runs as a schedule of steps. An all-gather
starts with chunk c on chip c and ends with every chunk on every chip; a reduce-scatter
is its mirror image (partial sums of chunk c travel towards chip c, which ends with the
whole sum); an all-reduce is a reduce-scatter followed by an all-gather. In one step each
link carries at most one chunk in each direction:

  ring, links used one way      X - 1 steps
  ring, links used both ways    ceil((X - 1) / 2) steps (half the chips are reached each way)
  line (no wraparound link)     X - 1 steps, both ways (the end chips are X - 1 hops apart)
  line, one way                 impossible: the last chip cannot reach the first

A step moves chunks of V / X bytes (V: the whole array, gathered or reduced), so with a
one-way link bandwidth W and a per-hop latency T_min the phase takes

    steps * max(T_min, V / (X * W))

which, on a full ring used both ways, tends to V / (2 W): How to Scale Your Model's
V / W_ici with W_ici the bidirectional bandwidth (part 3, "Sharded Matrices"). Over
several mesh axes the collective runs axis after axis (dimension-ordered): an all-gather
over a 4x4 slice gathers V/4 along the first axis, then V along the second.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..chips import SCALING_BOOK_NETWORKING, Chip

OPS = ("all-gather", "reduce-scatter", "all-reduce")
SCALING_BOOK_PART3 = "How to Scale Your Model (jax-ml/scaling-book), part 3"
SCALING_BOOK_PART2_NETWORKING = SCALING_BOOK_NETWORKING  # where each chip's wraparound rule comes from

Send = tuple[int, int, int]  # (source chip, destination chip, chunk)


def steps(size: int, *, bidirectional: bool = True, wraparound: bool = True) -> int:
    """How many steps one all-gather or reduce-scatter takes along an axis of `size` chips."""
    _check_links(size, bidirectional, wraparound)
    if size == 1:
        return 0
    if wraparound and bidirectional:
        return size // 2  # = ceil((size - 1) / 2)
    return size - 1


def ring_schedule(op: str, size: int, *, bidirectional: bool = True,
                  wraparound: bool = True) -> list[list[Send]]:
    """The sends of each step of an all-gather or reduce-scatter along one axis.

    All-gather: chip i starts with chunk i; a send copies a chunk the sender holds.
    Reduce-scatter: every chip starts with a partial of every chunk; a send adds the
    sender's partial of a chunk into the receiver's, and chip c ends with chunk c summed.
    """
    if op not in ("all-gather", "reduce-scatter"):
        raise ValueError(f"a ring schedule is for all-gather or reduce-scatter, got {op!r}")
    total = steps(size, bidirectional=bidirectional, wraparound=wraparound)
    gather = [[] for _ in range(total)]
    for chunk in range(size):
        # Each chunk spreads from its chip: to the right up to `right` hops, to the left up to `left`.
        right, left = _reach(chunk, size, total, bidirectional, wraparound)
        for hop in range(right):
            gather[hop].append(((chunk + hop) % size, (chunk + hop + 1) % size, chunk))
        for hop in range(left):
            gather[hop].append(((chunk - hop) % size, (chunk - hop - 1) % size, chunk))
    if op == "all-gather":
        return [sorted(step) for step in gather]
    # A reduce-scatter is the all-gather run backwards (last step first, every send reversed:
    # a broadcast tree read backwards sums towards its root), then mirrored (chip i <-> chip
    # X-1-i, chunks alike) so that sends run the same way round as the all-gather's.
    mirror = size - 1
    return [sorted((mirror - dst, mirror - src, mirror - chunk) for src, dst, chunk in step)
            for step in reversed(gather)]


def schedule_problems(op: str, size: int, schedule, *, bidirectional: bool = True,
                      wraparound: bool = True) -> list[str]:
    """What is wrong with a claimed schedule (empty when nothing is), found by running it.

    Checked: its shape (a list of steps, each a list of (source, destination, chunk)); every
    send on a link that exists (neighbours; the wraparound link only on a ring; one direction
    only when links are used one way); no link carrying two chunks in one direction in one
    step; an all-gather's sender holding the chunk at the start of the step, every chip
    receiving every other chunk exactly once; a reduce-scatter's partial sums never counting a
    chip twice, and chip c ending with chunk c summed over every chip; and the step count.
    """
    problems = []
    try:
        steps_ = [[tuple(int(v) for v in send) for send in step] for step in schedule]
        if any(len(send) != 3 for step in steps_ for send in step):
            raise ValueError
    except (TypeError, ValueError):
        return [f"a schedule is a list of steps, each a list of (source, destination, chunk) "
                f"triples of ints; got {_brief(schedule)}"]
    expected = steps(size, bidirectional=bidirectional, wraparound=wraparound)
    if len(steps_) != expected:
        problems.append(f"{len(steps_)} steps; this collective needs exactly {expected}")
    # holds[chip][chunk]: all-gather, whether the chip has the chunk; reduce-scatter, the set
    # of chips whose contribution its partial of the chunk sums.
    gather = op == "all-gather"
    holds = [[(c == chip) if gather else {chip} for c in range(size)] for chip in range(size)]
    received = [[0] * size for _ in range(size)]
    for number, step in enumerate(steps_, start=1):
        where = f"step {number}"
        links = [(src, dst) for src, dst, _ in step]
        for link in {link for link in links if links.count(link) > 1}:
            problems.append(f"{where}: link {link[0]}->{link[1]} carries {links.count(link)} "
                            f"chunks in one direction")
        before = [list(row) if gather else [set(p) for p in row] for row in holds]
        for src, dst, chunk in step:
            send = f"{where}: {src}->{dst} chunk {chunk}"
            if not (0 <= src < size and 0 <= dst < size and 0 <= chunk < size):
                problems.append(f"{send}: chips and chunks are numbered 0..{size - 1}")
                continue
            if not _is_link(src, dst, size, bidirectional, wraparound):
                problems.append(f"{send}: no such link on a {size}-chip "
                                f"{'ring' if wraparound else 'line'} used "
                                f"{'both ways' if bidirectional else 'one way'}")
            if gather:
                if not before[src][chunk]:
                    problems.append(f"{send}: chip {src} does not hold chunk {chunk} yet")
                received[dst][chunk] += 1
                holds[dst][chunk] = True
            else:
                counted = before[src][chunk] & holds[dst][chunk]
                if counted:
                    problems.append(f"{send}: counts chip(s) {sorted(counted)} a second time "
                                    f"in the partial sum")
                holds[dst][chunk] = holds[dst][chunk] | before[src][chunk]
    everyone = set(range(size))
    for chip in range(size):
        if gather:
            for chunk in range(size):
                if chunk != chip and received[chip][chunk] != 1:
                    problems.append(f"chip {chip} receives chunk {chunk} {received[chip][chunk]} "
                                    f"times; every chunk must reach every chip exactly once")
        elif holds[chip][chip] != everyone:
            missing = sorted(everyone - holds[chip][chip])
            problems.append(f"chip {chip} ends with chunk {chip} summed over {len(holds[chip][chip])} "
                            f"of {size} chips (missing {missing[:4]})")
    return problems


def _is_link(src: int, dst: int, size: int, bidirectional: bool, wraparound: bool) -> bool:
    right = dst == src + 1 or (wraparound and size > 1 and src == size - 1 and dst == 0)
    left = dst == src - 1 or (wraparound and size > 1 and src == 0 and dst == size - 1)
    return right or (bidirectional and left)


def _brief(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _reach(origin: int, size: int, total: int, bidirectional: bool, wraparound: bool) -> tuple[int, int]:
    """Hops a chunk travels right and left from the chip `origin` so that it reaches every other chip."""
    if not wraparound:
        return size - 1 - origin, origin
    if not bidirectional:
        return size - 1, 0
    return total, size - 1 - total  # the extra hop of an even ring goes right


def seconds(op: str, nbytes: float, size: int, *, link_bandwidth: float | None,
            bidirectional: bool = True, wraparound: bool = True, hop_latency: float = 0.0) -> float:
    """Roofline time of a collective of an nbytes array along one axis of `size` chips.

    nbytes is the whole array: the all-gather's result, the reduce-scatter's input, the
    all-reduce's array. link_bandwidth is one link's one-way bytes/s.
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    bandwidth = _bandwidth(link_bandwidth)
    per_step = max(hop_latency, nbytes / size / bandwidth)
    phases = 2 if op == "all-reduce" else 1
    return phases * steps(size, bidirectional=bidirectional, wraparound=wraparound) * per_step


def link_bandwidth(chip: Chip) -> float:
    """One ICI link's one-way bytes/s; a chip without a cited figure raises, never guesses."""
    return _bandwidth(chip.ici_link_bandwidth, chip.name)


def wraparounds(chip: Chip, topology: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes of a slice of this chip with this topology (chips per axis) wrap around: the
    chip's cited rule (chips.Wraparound)."""
    if chip.wraparound is None:
        raise ValueError(f"no cited wraparound rule for {chip.name}: say whether the axis "
                         f"wraps around (--wraparound yes or no)")
    return chip.wraparound.axes(tuple(topology))


def wraparound_rule(chip: Chip) -> str:
    """The cited rule, in words, for `tpucourse mesh` to print."""
    return chip.wraparound.says if chip.wraparound is not None else "given by --wraparound"


@dataclass(frozen=True)
class Phase:
    """The collective along one mesh axis."""

    op: str  # "all-gather" or "reduce-scatter"
    axis: int
    size: int
    wraparound: bool
    bidirectional: bool
    chunk_bytes: float
    seconds: float

    @property
    def schedule(self) -> list[list[Send]]:
        return ring_schedule(self.op, self.size, bidirectional=self.bidirectional,
                             wraparound=self.wraparound)


def plan(op: str, nbytes: float, topology: tuple[int, ...], *, link_bandwidth: float | None,
         wraparound: tuple[bool, ...], bidirectional: bool = True,
         hop_latency: float = 0.0) -> list[Phase]:
    """The phases of a collective over every axis of a slice, axis after axis.

    All-gather: axis 0 first, each phase gathering a larger piece (V / (product of the
    later axes)); reduce-scatter: the mirror order; all-reduce: reduce-scatter then all-gather.
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if len(wraparound) != len(topology):
        raise ValueError(f"one wraparound flag per axis: {len(topology)} axes, got {len(wraparound)}")
    gather = []
    for axis, size in enumerate(topology):
        piece = nbytes / math.prod(topology[axis + 1:])  # what this phase's result holds
        kw = dict(bidirectional=bidirectional, wraparound=wraparound[axis])
        gather.append(Phase("all-gather", axis, size, wraparound[axis], bidirectional, piece / size,
                            seconds("all-gather", piece, size, link_bandwidth=link_bandwidth,
                                    hop_latency=hop_latency, **kw)))
    scatter = [Phase("reduce-scatter", p.axis, p.size, p.wraparound, p.bidirectional, p.chunk_bytes,
                     p.seconds) for p in reversed(gather)]
    return {"all-gather": gather, "reduce-scatter": scatter, "all-reduce": scatter + gather}[op]


MAX_CHIPS_LISTED = 64  # an axis whose sends `tpucourse mesh` lists step by step


def plan_lines(op: str, nbytes: float, chip: Chip, topology: tuple[int, ...], phases: list[Phase],
               *, max_steps_shown: int = 8, wraparound_from: str | None = None) -> list[str]:
    """What `tpucourse mesh` prints: the phases, their steps, the predicted time."""
    chips = math.prod(topology)
    lines = [f"{op} of {_size(nbytes)} over a {chip.name} {'x'.join(map(str, topology))} slice "
             f"({chips} chips), axis after axis",
             f"link: {chip.ici_link_bandwidth:.3g} B/s one way ({chip.sources.get('ici', 'no source')})"]
    if wraparound_from:
        lines.append(f"wraparound: {wraparound_from}")
    for phase in phases:
        shape = ("ring" if phase.wraparound else "line (no wraparound link)") + (
            ", links used both ways" if phase.bidirectional else ", links used one way")
        count = steps(phase.size, bidirectional=phase.bidirectional, wraparound=phase.wraparound)
        lines.append(f"{phase.op} along axis {phase.axis}: {phase.size} chips, {shape}; "
                     f"{count} steps of one {_size(phase.chunk_bytes)} chunk per link "
                     f"and direction: {phase.seconds * 1e6:.1f} us")
        if phase.size > MAX_CHIPS_LISTED:  # the schedule has about size^2 sends: count it, never build it
            lines.append(f"  (the sends of each step are listed for axes of at most {MAX_CHIPS_LISTED} chips)")
            continue
        for number, step in enumerate(phase.schedule[:max_steps_shown], start=1):
            sends = ", ".join(f"{src}->{dst} c{chunk}" for src, dst, chunk in step)
            lines.append(f"  step {number}: {sends}")
        if count > max_steps_shown:
            lines.append(f"  ... {count - max_steps_shown} more steps")
    total = sum(p.seconds for p in phases)
    lines.append(f"predicted: {total * 1e6:.1f} us (roofline prediction: link bandwidth only, "
                 f"every link busy every step; not a measurement)")
    return lines


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text: str) -> int:
    """'1GiB' -> 1073741824, '34e6' -> 34000000, '512MB' -> 512000000."""
    found = re.fullmatch(r"\s*([\d.]+(?:e\d+)?)\s*([A-Za-z]*)\s*", text)
    if not found or found.group(2).upper() not in _UNITS:
        raise ValueError(f"bytes {text!r}: a number with an optional unit (B, KB, MB, GB, KiB, MiB, GiB)")
    value = float(found.group(1)) * _UNITS[found.group(2).upper()]
    if value <= 0:
        raise ValueError(f"bytes {text!r} must be positive")
    return int(value)


def _check_links(size: int, bidirectional: bool, wraparound: bool) -> None:
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"an axis needs at least 1 chip, got {size!r}")
    if size > 1 and not wraparound and not bidirectional:
        raise ValueError(f"a line of {size} chips used one way cannot run a collective: the last "
                         f"chip never reaches the first")


def _bandwidth(value: float | None, chip_name: str = "this chip") -> float:
    if value is None:
        raise ValueError(f"no cited ICI link bandwidth for {chip_name}; the model does not guess one")
    if not value > 0:
        raise ValueError(f"link bandwidth must be positive, got {value!r}")
    return float(value)


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.4g} {unit} ({n:,.0f} bytes)"
    return f"{n:,.0f} bytes"
