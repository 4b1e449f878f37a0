"""`tpucourse timeline`: a distributed kernel's schedule, simulated round by round, and where it
deadlocks (instruments/semaphore_timeline.py); exit status 1 when it deadlocks.

    tpucourse timeline exchange-deadlock --devices 4
    tpucourse timeline my_schedule.py:PROGRAMS --devices 8
"""

from __future__ import annotations


def add_parser(subcommands):
    t = subcommands.add_parser("timeline", help="a distributed kernel's schedule, round by round, and where "
                               "it deadlocks")
    t.add_argument("schedule", nargs="?", help="a shipped schedule (--list) or FILE.py:NAME, NAME a list of "
                   "programs or a function of the device count")
    t.add_argument("--devices", type=int, default=4, help="devices in the ring (default 4)")
    t.add_argument("--list", action="store_true", help="list the shipped schedules")
    return t


def run(args) -> int:
    from ..instruments import semaphore_timeline as timeline

    if args.list or not args.schedule:
        for name, build in timeline.SCHEDULES.items():
            print(f"{name:<20} {build.__doc__.strip().splitlines()[0]}")
        return 0
    programs = timeline.load_schedule(args.schedule, args.devices)
    result = timeline.run(programs)
    print(timeline.render(programs, result))
    return 1 if result.deadlock is not None else 0
