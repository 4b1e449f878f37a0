"""`tpucourse records check | link`: the gate records outside a test run.

    tpucourse records check [--repair]    every bad line and rejected row, with path and line, and every
                                          row whose commit does not hold the code it names
    tpucourse records check --against T   which of your passes a trusted run reproduced (exit 1 if any is not)
    tpucourse records link URL            gate 05's upstream submission, self-reported
"""

from __future__ import annotations

from pathlib import Path

from .. import chips
from ..core.course import find_course_root
from ..gates import criteria, report
from ..gates import records as rec
from ..core.paths import shown


def add_parser(subcommands):
    r = subcommands.add_parser("records", help="check or repair gate records; record a public link")
    actions = r.add_subparsers(dest="action", required=True)
    c = actions.add_parser("check", help="list bad lines and rows that fail re-judging (exit 1 if any)")
    c.add_argument("paths", nargs="*", help=f"records files (default: {rec.DEFAULT_PATH} and "
                   f"{rec.PUBLISHED_PATH} where they exist)")
    c.add_argument("--repair", action="store_true",
                   help=f"move unreadable lines to <file>{rec.SIDE_SUFFIX}; every row that parses stays")
    c.add_argument("--against", metavar="TRUSTED", default=None,
                   help="a records file from a run you trust: which passes it reproduced for the same code")
    link = actions.add_parser("link", help="record the public link of gate 05's upstream submission "
                              "(self-reported: the course cannot check it)")
    link.add_argument("url")
    link.add_argument("--gate", type=int, default=5)
    link.add_argument("--criterion", default="upstream")
    return r


def _root() -> Path:
    root = find_course_root(Path.cwd())
    if root is None:
        raise ValueError(f"no course.toml at or above {Path.cwd()}: run tpucourse inside the course checkout")
    return root


def run(args) -> int:
    return {"check": _check, "link": _link}[args.action](args)


def _check(args) -> int:
    root = find_course_root(Path.cwd())
    if args.paths:
        paths = [Path(p) for p in args.paths]
    else:
        base = root or Path.cwd()
        paths = [base / p for p in (rec.DEFAULT_PATH, rec.PUBLISHED_PATH) if (base / p).exists()]
    if not paths:
        print("no records files: nothing to check")
        return 0
    registry = chips.ChipRegistry()
    problems = 0
    for path in paths:
        if args.repair:
            moved = rec.repair(path)
            for bad in moved:
                print(f"{bad}: moved to {rec.side_file(path).name}")
        loaded = report.load([path], registry)
        commits = report.check_commits(loaded.accepted, root) if root is not None else report.CommitCheck((), ())
        problems += len(loaded.problems()) + len(commits.problems)
        print(f"{path}: {len(loaded.accepted)} rows accepted, {len(loaded.rejected)} rejected, "
              f"{len(loaded.bad)} unreadable lines")
        for line in loaded.problems():
            print(f"  {line}")
        for line in commits.problems:
            print(f"  {path}: commit check: {line}")
        if commits.unknown:
            print(f"  commits this repository does not have, so their rows' code is not checked: "
                  f"{', '.join(commits.unknown)}")
        if loaded.bad and not args.repair:
            print(f"  repair: tpucourse records check --repair {path} (moves them to "
                  f"{rec.side_file(path).name}; nothing is deleted)")
    unreproduced = _against(paths, Path(args.against), registry) if args.against else 0
    return 1 if problems or unreproduced else 0


def _against(paths, trusted_path: Path, registry) -> int:
    """Each passing measured row of `paths`, reproduced or not by the trusted file for the same
    code; returns how many were not (the exit status says so)."""
    mine = report.load(paths, registry).accepted
    trusted = report.load([trusted_path], registry).accepted
    print(f"self-reported passes against {trusted_path} (a run you trust, of the same code):")
    passes = [r for r in mine if r.method == "measured" and r.verdict == "pass"]
    if not passes:
        print("  no measured passes to check")
    unreproduced = 0
    for r in passes:
        same = [t for t in trusted if t.slot == r.slot and t.method == "measured" and t.modules == r.modules]
        if any(t.verdict == "pass" for t in same):
            verdict = "reproduced"
        elif any(t.verdict == "fail" for t in same):
            verdict = "contradicted: the trusted run failed it"
        else:
            verdict = "not reproduced: the trusted run has no row for this code"
        unreproduced += verdict != "reproduced"
        print(f"  gate {r.gate:02d} {r.criterion} {r.op} on {r.chip}: {verdict}")
    if unreproduced:
        print(f"  {unreproduced} of {len(passes)} passes not reproduced by {trusted_path}")
    return unreproduced


def _link(args) -> int:
    root = _root()
    g = criteria.gate(args.gate)
    c = g.criterion(args.criterion)
    if c.kind != "public":
        raise ValueError(f"{g.label} {c.id} is not a public criterion; only a public criterion takes a link")
    row = rec.link_record(args.url, gate=g.number, criterion=c.id, chapter=g.chapter,
                          notes="recorded by tpucourse records link; self-reported, not checked")
    path = root / rec.DEFAULT_PATH
    rec.append(path, row)
    print(f"recorded {args.url} for {g.label} {c.id} in {shown(path, root)} (self-reported)")
    return 0

