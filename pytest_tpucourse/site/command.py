"""The `tpucourse site` subcommand: its arguments and what it runs."""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUT = Path(".tpucourse") / "site"
DEFAULT_PORT = 8765


def add_parser(subcommands) -> None:
    s = subcommands.add_parser("site", help="the course site: the stack, the chapters, the bench and the six "
                               "instruments, as static pages (--serve: live on 127.0.0.1)")
    s.add_argument("--out", help=f"the folder to write it to (default: {DEFAULT_OUT} in the course)")
    s.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1, instruments answered live")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"with --serve (default {DEFAULT_PORT}; 0: any free)")


def run(args) -> int:
    from ..commands.learner import course_here
    from . import build, server

    course = course_here()
    out = Path(args.out) if args.out else course.root / DEFAULT_OUT
    build.clear(out)
    pages = build.build(course, out)
    print(f"wrote {len(pages)} pages to {out} (open {out / 'index.html'})", flush=True)
    if args.serve:
        server.serve(out, course.root, args.port)
    return 0
