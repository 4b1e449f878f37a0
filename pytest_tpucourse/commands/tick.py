"""`tpucourse tick chNN [N] [--undo]`: a chapter's self-test items, ticked in the learner's word
(learner/self_test.py, which the site's tick boxes call too)."""

from __future__ import annotations

from ..learner import self_test
from ..learner.requests import course_here


def add_parser(subcommands):
    c = subcommands.add_parser("tick", help="tick a chapter's self-test item (\"Can you ...\"): your word, "
                               "shown by progress as self-reported")
    c.add_argument("chapter", help="chNN, e.g. ch15; alone, lists the items and your ticks")
    c.add_argument("item", nargs="?", type=int, help="the item's number (1-based)")
    c.add_argument("--undo", action="store_true", help="remove the tick")
    return c


def run(args) -> int:
    print("\n".join(self_test.tick(course_here(), args.chapter, args.item, undo=args.undo)))
    return 0
