"""`tpucourse site [--out DIR] [--serve [--port N]]`: the course site built into one folder (site/build.py),
then, with --serve, served on 127.0.0.1 with the instruments answered live (site/server.py)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUT = Path(".tpucourse") / "site"
DEFAULT_PORT = 8765


def add_parser(subcommands):
    s = subcommands.add_parser("site", help="the course site: the stack, the chapters, the bench and the six "
                               "instruments, as static pages (--serve: live on 127.0.0.1)")
    s.add_argument("--out", help=f"the folder to write it to (default: {DEFAULT_OUT} in the course)")
    s.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1, instruments answered live")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"with --serve (default {DEFAULT_PORT}; 0: any free)")
    return s


def run(args) -> int:
    from ..learner.requests import course_here
    from ..site import build, server

    course = course_here()
    out = Path(args.out) if args.out else course.root / DEFAULT_OUT
    build.clear(out)
    pages = build.build(course, out)
    print(f"wrote {len(pages)} pages to {out} (open {out / 'index.html'})", flush=True)
    if args.serve:
        httpd = server.make_server(out, course.root, args.port)
        print(f"serving the course site on http://{server.HOST}:{httpd.server_address[1]}/ (Ctrl-C stops)",
              flush=True)
        server.serve(httpd)
    return 0
