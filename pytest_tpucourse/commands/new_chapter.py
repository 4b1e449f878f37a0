"""A new chapter, its exercises and its gate, in every place the course reads them (for authors).

    tpucourse new-chapter "Scaled add" --exercise axpy [--exercise more] [--gate] [--summary TEXT]

An author's tool, left out of `tpucourse --help` (docs/authoring.md, "Adding a chapter"): a
learner's loop never needs it, and it edits the course itself (course.toml, the gate table in
the package source, the records' schema). The work is authoring/scaffold.py's; this prints it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..authoring import scaffold
from ..core.course import find_course_root
from ..learner import shipped

NAME = "new-chapter"
LISTED = False  # left out of `tpucourse --help`: not a learner's command


def add_parser(subcommands):
    p = subcommands.add_parser(NAME, description=__doc__.splitlines()[0])  # no help=: not listed
    p.add_argument("title", help="the chapter's title, as course.toml and its README say it")
    p.add_argument("--exercise", action="append", required=True, metavar="NAME",
                   help="an exercise: its module, its function and test_NAME.py (repeat for more, in order)")
    p.add_argument("--gate", action="store_true", help="a stage closed by the course's next gate")
    p.add_argument("--summary", help="the chapter's one-line summary (default: a TODO)")
    p.add_argument("--root", type=Path, help="the course checkout (default: the one holding this folder)")
    return p


def run(args) -> int:
    root = args.root or find_course_root(Path.cwd())
    if root is None:
        print(f"tpucourse {NAME}: no course.toml here or above: run it in a course checkout", file=sys.stderr)
        return 2
    try:
        chapter = scaffold.plan(root, args.title, args.exercise, gate=args.gate, summary=args.summary)
        written = scaffold.write(root, chapter)
    except scaffold.ScaffoldError as error:
        print(f"tpucourse {NAME}: {error}; nothing was written", file=sys.stderr)
        return 2
    what = f"chapter {chapter.number} {chapter.title}" + (
        f", stage {chapter.stage} closed by gate {chapter.gate:02d}" if chapter.gate is not None else "")
    print(f"{what}: wrote {len(written)} places")
    for place in written:
        print(f"  {'created' if place.created else 'edited '}  {place.path}: {place.what}")
    if (Path(root) / shipped.MANIFEST).is_file():  # the new graded tests are the course's as shipped
        shipped.write(root)
        print(f"  edited   {shipped.MANIFEST}: the new test files recorded as shipped (tpucourse shipped)")
    print("checks: pytest tests/test_course.py tests/test_package_shape.py && "
          f"pytest tests/test_grading_chapters.py -k {chapter.id}")
    print("only you can write (every TODO(author) marks one):")
    for item in scaffold.PERSON_WRITES:
        print(f"  - {item.replace('chNN', chapter.id)}")
    return 0
