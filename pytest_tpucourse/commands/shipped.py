"""The course's record of its shipped test files, shipped.json, written again (for authors).

    tpucourse shipped            # write shipped.json from the course as it is now
    tpucourse shipped --check    # exit 1, naming each file, where shipped.json is not current

An author's tool, left out of `tpucourse --help`: run it after changing a graded test file or a
conftest.py, and commit shipped.json with them (tests/test_shipped.py fails until then). What the
record is for: learner/shipped.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.course import find_course_root
from ..learner import shipped

NAME = "shipped"
LISTED = False  # left out of `tpucourse --help`: not a learner's command


def add_parser(subcommands):
    p = subcommands.add_parser(NAME, description=__doc__.splitlines()[0])  # no help=: not listed
    p.add_argument("--check", action="store_true", help="write nothing: exit 1 where the record is not current")
    p.add_argument("--root", type=Path, help="the course (default: the one holding this folder)")
    return p


def stale(root: Path) -> list[str]:
    """'<path>: <how>' of each file where the course's record differs from the course as it is now."""
    now = shipped.build(root)["files"]
    kept = shipped.record(root)
    if kept is None:
        return [f"{shipped.MANIFEST}: missing or unreadable"]
    return ([f"{path}: not in {shipped.MANIFEST}" for path in sorted(set(now) - set(kept))]
            + [f"{path}: in {shipped.MANIFEST} but not in the course" for path in sorted(set(kept) - set(now))]
            + [f"{path}: changed since {shipped.MANIFEST} was written" for path in sorted(set(now) & set(kept))
               if now[path] != kept[path]])


def run(args) -> int:
    root = args.root or find_course_root(Path.cwd())
    if root is None:
        print(f"tpucourse {NAME}: no course.toml here or above: run it in a course checkout", file=sys.stderr)
        return 2
    if args.check:
        problems = stale(root)
        for line in problems:
            print(line)
        print(f"{shipped.MANIFEST}: " + ("not current: `tpucourse shipped` writes it" if problems else "current"))
        return 1 if problems else 0
    path = shipped.write(root)
    print(f"{path.name}: {len(shipped.record(root) or {})} files recorded")
    return 0
