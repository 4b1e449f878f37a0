"""`tpucourse grade`: grade many trees, each in a sandbox of its own, into one gradebook.

    tpucourse grade trees/* --chapters ch01,ch11 --jobs 2 --key ~/grading.key --out gradebook.json
    tpucourse grade trees/* --shard 2/4 --key ~/grading.key --out shard-2.json   # one of four machines
    tpucourse grade --merge shard-*.json --key ~/grading.key --out gradebook.json
    tpucourse grade --merge shard-1.json shard-2.json --without-shard 3/4 --without-shard 4/4 ...   # a partial merge

Run from the course checkout (its course.toml and graded tests grade every tree). What
each tree's processes may and may not see is classroom/sandbox.py's to say (no sandbox, no
grading, unless --no-sandbox); its run, classroom/runner.py's; how many run at once,
classroom/trees.py's; the gradebook's format is classroom/gradebook.py's, its digest
classroom/signing.py's; the values judged outside each tree's process (the trusted check,
whose worker runs in the tree's sandbox), classroom/trusted_check.py's; the similarity report
beside it, classroom/similarity.py's; docs/grading.md has a CI matrix example.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ..classroom import gradebook, junit, shards, signing, similarity
from ..classroom.escaping import for_terminal
from ..classroom.progress_line import ProgressLine
from ..classroom.runner import HYPOTHESIS_PROFILE, GradingRun, warm_cache
from ..classroom.sandbox import CourseView, SandboxUnavailable, find_isolation
from ..classroom.trees import grade_trees
from ..core.course import find_course_root, load_course

SECONDS_PER_CHAPTER = 600.0  # the default wall limit of a tree's run, per chapter graded


def add_parser(subcommands):
    g = subcommands.add_parser("grade", help="grade many learners' trees (each laid out like solutions/), "
                               "each in a sandbox of its own, into a gradebook")
    g.add_argument("trees", nargs="*", metavar="TREE", help="the trees to grade")
    g.add_argument("--out", required=True, metavar="FILE", help="the gradebook: JSON, or CSV when FILE ends in .csv")
    g.add_argument("--chapters", metavar="chNN,...", help="the chapters to grade (default: every chapter "
                   "with graded tests)")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="trees graded at a time (default 1)")
    g.add_argument("--shard", metavar="K/N", help="grade only the K-th of N stable parts of the sorted trees")
    g.add_argument("--timeout", type=float, metavar="S", help=f"wall limit of one tree's run (default "
                   f"{SECONDS_PER_CHAPTER:g} s per chapter)")
    g.add_argument("--junitxml", metavar="DIR", help="write one JUnit XML file per tree into DIR, from the gradebook")
    g.add_argument("--jax-cache", default=".tpucourse/jax-cache", metavar="DIR",
                   help="the compile cache, filled from the course's solutions, that each tree's run starts from a "
                   "copy of (relative to the course root; 'none': each run compiles everything itself)")
    g.add_argument("--key", metavar="FILE", help="the instructor's key, a file outside every tree: the JSON "
                   "gradebook carries a digest made with it, --merge takes only gradebooks that verify with it, and "
                   "the trusted check draws its cases from it, so every shard draws the same (without it: fresh "
                   "cases each grading)")
    g.add_argument("--no-trusted-check", action="store_true", help="grade by each tree's pytest run alone, without "
                   "judging its values in a process of their own (docs/grading.md: lies in the tree's own process "
                   "then count)")
    g.add_argument("--no-sandbox", action="store_true", help="grade without a sandbox per tree (each tree's code "
                   "then runs as you, and can read and write what you can): only for trees you trust")
    g.add_argument("--merge", nargs="+", metavar="GRADEBOOK", help="merge one grading's shards' JSON gradebooks "
                   "into --out: every shard, each verified with --key")
    g.add_argument("--without-shard", action="append", default=[], metavar="K/N", help="with --merge: a partial "
                   "merge, without shard K of N (each shard left out named by one --without-shard)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress line and no summary table")
    return g


def run(args) -> int:
    secret = signing.read_key(args.key) if args.key else None
    if args.merge:
        if args.trees:
            raise ValueError("--merge takes gradebooks, not trees")
        if secret is None:
            raise ValueError("--merge takes only gradebooks that verify: give --key FILE, the key they were "
                             "graded with")
        without = tuple(shards.parse(text) for text in args.without_shard)
        merged = gradebook.merge([gradebook.read(path) for path in args.merge], secret, names=args.merge,
                                 without=without)
        gradebook.write(_signed(merged, secret, args.out), args.out)
        if not args.quiet:
            print(_merged_line(merged, args.out, len(args.merge), without))
        return 0
    if args.without_shard:
        raise ValueError("--without-shard names the shards a --merge leaves out")
    root = find_course_root(Path.cwd())
    if root is None:
        raise ValueError("run it in the course checkout (no course.toml here or above)")
    course = load_course(root)
    chapters = _chapters(course, args.chapters)
    class_names = _tree_names(args.trees)
    names = shards.shard(class_names, *shards.parse(args.shard)) if args.shard else class_names
    if args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    timeout = args.timeout if args.timeout is not None else SECONDS_PER_CHAPTER * len(chapters)
    if timeout <= 0:
        raise ValueError("--timeout must be positive")
    junit_dir = Path(args.junitxml) if args.junitxml else None
    report = similarity.path_beside(args.out)
    unseen = [*class_names, args.out, report, *([junit_dir] if junit_dir else []), *([args.key] if args.key else [])]
    if secret is not None:
        _refuse_key_inside_trees(Path(args.key), class_names)
    try:
        isolation = find_isolation(unsandboxed=args.no_sandbox)
    except SandboxUnavailable as error:
        raise ValueError(f"no sandbox for the trees: {error}") from None
    jax_cache = args.jax_cache if args.jax_cache == "none" else str(course.root / args.jax_cache)
    if not args.quiet:
        print(f"sandbox: {isolation.describe()}", file=sys.stderr)
    trusted = None if args.no_trusted_check else _trusted_check(course, chapters, secret, jax_cache)
    grading = GradingRun(course_root=course.root, chapters=tuple(chapters), timeout=timeout, jax_cache=jax_cache,
                         isolation=isolation, view=CourseView.of(course.root, hidden=unseen), trusted=trusted)
    _fill_the_cache(grading, quiet=args.quiet)
    try:
        progress = ProgressLine(len(names), stream=sys.stderr, quiet=args.quiet)
        runs = grade_trees(grading, names, jobs=args.jobs, progress=progress)
    except KeyboardInterrupt:
        print("tpucourse grade: interrupted; every tree's run was stopped, no gradebook written", file=sys.stderr)
        return 130
    facts = gradebook.course_facts(course, chapters, isolation=isolation.kind, hypothesis_profile=HYPOTHESIS_PROFILE,
                                   trusted_check=trusted is not None)
    book = gradebook.build(facts, gradebook.graded_exercises(course, chapters), runs,
                           of_class=shards.class_facts(class_names),
                           shard=shards.held(*shards.parse(args.shard)) if args.shard else None)
    gradebook.write(_signed(book, secret, args.out), args.out)
    if junit_dir is not None:
        junit.write_all(book, junit_dir)
    if not args.quiet:  # the gradebook is whole: its table first, the reports after it, within their limits
        chapters_of = {e.key: c.id for c in course.chapters for e in c.exercises}
        print("\n".join(gradebook.summary_lines(book, chapters_of)))
        print(f"wrote {for_terminal(args.out)}", flush=True)
    try:
        evidence = similarity.report(course, chapters, class_names)  # the whole class, on every shard
    except Exception as error:  # evidence beside the gradebook: one it cannot make is said, never the grading's end
        evidence = similarity.unmade(chapters, f"{type(error).__name__}: {error}")
    similarity.write(evidence, report)
    if not args.quiet:
        print(similarity.summary_line(evidence, report))
    return 0


def _merged_line(book: dict, out: str, books: int, without) -> str:
    """What a merge wrote: which shards of which grading, of how many trees."""
    course = book["course"]
    held = shards.describe(book["shard"])
    left_out = (f", without {', '.join(f'{k}/{n}' for k, n in without)} (a partial merge, as asked)"
                if without else "")
    return (f"wrote {for_terminal(out)}: {len(book['trees'])} trees of a class of {book['class']['trees']}, "
            f"{held}{left_out}, from {books} gradebooks of one grading (course {str(course.get('commit'))[:12]}, "
            f"{', '.join(course.get('chapters', []))}), each verified")


def _fill_the_cache(grading: GradingRun, *, quiet: bool) -> None:
    """The shared compile cache, from the course's own solutions graded in a sandbox (runner.warm_cache):
    a sandbox that cannot grade them cannot grade a class."""
    with tempfile.TemporaryDirectory(prefix="tpucourse-grade-") as folder:
        warm = warm_cache(grading, Path(folder) / "solutions")
    if warm is None:
        return
    if not warm.finished:
        last = "; ".join(warm.log[-3:])
        raise ValueError(f"the course's own solutions could not be graded in the sandbox ({warm.outcome}: "
                         f"{warm.message}{'; ' + last if last else ''}): the trees would not be either")
    if not quiet:
        print(f"compile cache: filled from the course's solutions, graded in the sandbox in {warm.seconds:.0f} s",
              file=sys.stderr)


def _trusted_check(course, chapters: list[str], secret: bytes | None, jax_cache: str):
    """The class's trusted cases, drawn from the instructor's key and answered here, in the grader's
    process, once for every tree (trusted_check.py)."""
    from ..classroom.trusted_check import TrustedCheck, seed_from

    return TrustedCheck.prepare(course, chapters, seed_from(secret), jax_cache=jax_cache)


def _signed(book: dict, secret: bytes | None, out: str) -> dict:
    """A JSON gradebook with its digest when there is a key (a CSV one has no place for it)."""
    return book if secret is None or str(out).endswith(".csv") else gradebook.sign(book, secret)


def _refuse_key_inside_trees(key: Path, trees: list[str]) -> None:
    key = key.resolve()
    for tree in trees:
        if Path(tree).resolve() in key.parents:
            raise ValueError(f"--key {key}: inside the tree {for_terminal(tree)}; keep the key outside every tree")


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
        raise ValueError(f"trees given twice: {', '.join(map(for_terminal, twice))}")
    missing = [n for n in names if not Path(n).is_dir()]
    if missing:
        raise ValueError(f"not a directory: {', '.join(map(for_terminal, missing))}")
    return sorted(names)
