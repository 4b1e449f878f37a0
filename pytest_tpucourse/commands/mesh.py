"""`tpucourse mesh`: a collective over a TPU slice, hop by hop, and its predicted time (instruments/ici.py).

    tpucourse mesh --chip v5e --topology 4x4 --op all-gather --bytes 1GiB
"""

from __future__ import annotations

import re

from .. import chips
from ..instruments import ici
from ..run import registered_chips


def add_parser(subcommands):
    m = subcommands.add_parser("mesh", help="a collective over a TPU slice, hop by hop, and its predicted time")
    m.add_argument("--chip", default=chips.DEFAULT_CHIP, help=", ".join(chips.TPU_CHIPS) + ", or one a plugin registers")
    m.add_argument("--topology", required=True, help="chips per mesh axis, e.g. 4x4 or 4x4x4")
    m.add_argument("--op", required=True, choices=ici.OPS)
    m.add_argument("--bytes", required=True, help="the whole array, e.g. 1GiB, 512MB, 34e6")
    m.add_argument("--wraparound", choices=("auto", "yes", "no"), default="auto",
                   help="whether each axis wraps around (auto: the chip's cited rule)")
    m.add_argument("--one-way", action="store_true", help="use each link in one direction only")
    return m


def run(args) -> int:
    chip = registered_chips.named(args.chip)  # built in, or registered by a plugin or conftest here
    if not re.fullmatch(r"\d+([x×]\d+)*", args.topology.lower()):
        raise ValueError(f"--topology {args.topology!r}: chips per axis, e.g. 4x4 or 4x4x4")
    topology = tuple(int(d) for d in re.split(r"[x×]", args.topology.lower()))
    if min(topology) < 1:
        raise ValueError(f"--topology {args.topology!r}: every axis needs at least one chip")
    if args.wraparound == "auto":
        wraparound = ici.wraparounds(chip, topology)
        source = f"{ici.wraparound_rule(chip)} ({ici.SCALING_BOOK_PART2_NETWORKING})"
    else:
        wraparound = (args.wraparound == "yes",) * len(topology)
        source = f"{'every' if args.wraparound == 'yes' else 'no'} axis, as --wraparound {args.wraparound} says"
    nbytes = ici.parse_bytes(args.bytes)
    phases = ici.plan(args.op, nbytes, topology, link_bandwidth=ici.link_bandwidth(chip), wraparound=wraparound,
                      bidirectional=not args.one_way)
    print("\n".join(ici.plan_lines(args.op, nbytes, chip, topology, phases, wraparound_from=source)))
    return 0
