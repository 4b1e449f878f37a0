"""`tpucourse grade`: grade many trees, each in a pytest process of its own, into one gradebook.

    tpucourse grade trees/* --chapters ch01,ch11 --jobs 2 --out gradebook.json
    tpucourse grade trees/* --shard 2/4 --out shard-2.json      # one of four machines
    tpucourse grade --merge shard-*.json --out gradebook.json   # exactly the unsharded gradebook

Run from the course checkout (its course.toml and graded tests grade every tree). What
each tree's process may and may not touch is classroom/runner.py's to say; how many run at
once, classroom/trees.py's; the gradebook's format is classroom/gradebook.py's; the values
judged outside each tree's process, classroom/trusted_check.py's; docs/grading.md has a CI
matrix example.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..classroom import gradebook, junit, shards
from ..classroom.progress_line import ProgressLine
from ..classroom.runner import GradingRun
from ..classroom.trees import grade_trees
from ..core.course import find_course_root, load_course

SECONDS_PER_CHAPTER = 600.0  # the default wall limit of a tree's run, per chapter graded


def add_parser(subcommands):
    g = subcommands.add_parser("grade", help="grade many learners' trees (each laid out like solutions/), "
                               "one pytest process per tree, into a gradebook")
    g.add_argument("trees", nargs="*", metavar="TREE", help="the trees to grade")
    g.add_argument("--out", required=True, metavar="FILE", help="the gradebook: JSON, or CSV when FILE ends in .csv")
    g.add_argument("--chapters", metavar="chNN,...", help="the chapters to grade (default: every chapter "
                   "with graded tests)")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="trees graded at a time (default 1)")
    g.add_argument("--shard", metavar="K/N", help="grade only the K-th of N stable parts of the sorted trees")
    g.add_argument("--timeout", type=float, metavar="S", help=f"wall limit of one tree's run (default "
                   f"{SECONDS_PER_CHAPTER:g} s per chapter)")
    g.add_argument("--junitxml", metavar="DIR", help="write one JUnit XML file per tree into DIR")
    g.add_argument("--jax-cache", default=".tpucourse/jax-cache", metavar="DIR",
                   help="the compile cache every tree's run shares (relative to the course root; 'none': "
                   "each run compiles everything itself)")
    g.add_argument("--key", metavar="FILE", help="a file holding the instructor's secret, outside every tree: "
                   "the trusted check draws its cases from it, so every shard given the same key draws the same "
                   "cases (default: fresh cases each grading)")
    g.add_argument("--no-trusted-check", action="store_true", help="grade by each tree's pytest run alone, without "
                   "judging its values in a process of their own (docs/grading.md: in-process lies then count)")
    g.add_argument("--merge", nargs="+", metavar="GRADEBOOK", help="merge the shards' JSON gradebooks into --out")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress line and no summary table")
    return g


def run(args) -> int:
    if args.merge:
        if args.trees:
            raise ValueError("--merge takes gradebooks, not trees")
        merged = gradebook.merge([gradebook.read(path) for path in args.merge])
        gradebook.write(merged, args.out)
        if not args.quiet:
            print(f"wrote {args.out}: {len(merged['trees'])} trees from {len(args.merge)} gradebooks")
        return 0
    root = find_course_root(Path.cwd())
    if root is None:
        raise ValueError("run it in the course checkout (no course.toml here or above)")
    course = load_course(root)
    chapters = _chapters(course, args.chapters)
    names = _tree_names(args.trees)
    if args.shard:
        names = shards.shard(names, *shards.parse(args.shard))
    if args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    timeout = args.timeout if args.timeout is not None else SECONDS_PER_CHAPTER * len(chapters)
    if timeout <= 0:
        raise ValueError("--timeout must be positive")
    junit_dir = Path(args.junitxml) if args.junitxml else None
    junit_names = junit.file_names(names) if junit_dir else {}
    jax_cache = args.jax_cache if args.jax_cache == "none" else str(course.root / args.jax_cache)
    trusted = None if args.no_trusted_check else _trusted_check(course, chapters, args.key, jax_cache)
    grading = GradingRun(course_root=course.root, chapters=tuple(chapters), timeout=timeout,
                         jax_cache=jax_cache, junitxml=junit_dir is not None, trusted=trusted)
    try:
        progress = ProgressLine(len(names), stream=sys.stderr, quiet=args.quiet)
        runs = grade_trees(grading, names, jobs=args.jobs, progress=progress)
    except KeyboardInterrupt:
        print("tpucourse grade: interrupted; every tree's run was stopped, no gradebook written", file=sys.stderr)
        return 130
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        for name, tree_run in runs.items():
            junit.write(tree_run, junit_dir / junit_names[name])
    book = gradebook.build(gradebook.course_facts(course, chapters, trusted_check=trusted is not None),
                           gradebook.graded_exercises(course, chapters), runs)
    gradebook.write(book, args.out)
    if not args.quiet:
        chapters_of = {e.key: c.id for c in course.chapters for e in c.exercises}
        print("\n".join(gradebook.summary_lines(book, chapters_of)))
        print(f"wrote {args.out}")
    return 0


def _trusted_check(course, chapters: list[str], key: str | None, jax_cache: str):
    """The class's trusted cases, drawn and answered here once for every tree (trusted_check.py)."""
    from ..classroom.trusted_check import TrustedCheck, seed_from

    secret = None
    if key is not None:
        try:
            secret = Path(key).read_bytes()
        except OSError as error:
            raise ValueError(f"--key {key}: {error.strerror}") from None
        if not secret.strip():
            raise ValueError(f"--key {key}: the file is empty")
    return TrustedCheck.prepare(course, chapters, seed_from(secret), jax_cache=jax_cache)


def _chapters(course, text: str | None) -> list[str]:
    graded = [c.id for c in course.chapters if gradebook.graded_exercises(course, [c.id])]
    if not text:
        return graded
    asked = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [c for c in asked if c not in graded]
    if unknown:
        raise ValueError(f"--chapters: {', '.join(unknown)}: not a chapter with graded tests "
                         f"({', '.join(graded)})")
    return [c for c in graded if c in asked]


def _tree_names(trees: list[str]) -> list[str]:
    if not trees:
        raise ValueError("give the trees to grade (or --merge the shards' gradebooks)")
    names = [os.path.normpath(tree) for tree in trees]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"trees given twice: {', '.join(twice)}")
    missing = [n for n in names if not Path(n).is_dir()]
    if missing:
        raise ValueError(f"not a directory: {', '.join(missing)}")
    return sorted(names)
