"""The course on a chip, in one command: every run its hardware claims rest on, each a line of
bench/device_runs.jsonl (pytest_tpucourse/gates/device_runs.py has the format).

    python bench/device_runs.py --commit $(git rev-parse HEAD)                  all four kinds
    python bench/device_runs.py --kinds solutions stubs --commit ...            some of them
    python bench/device_runs.py --kinds gates --chapters ch13 --budget 480 ...  a slice, in a time limit
    python bench/device_runs.py --kinds gates --finish-searches ...            unfinished searches go on
    python bench/device_runs.py --dry-run                                       the commands only

Kinds, each one pytest process (one program holds a TPU at a time):
  solutions  `pytest exercises --solutions`: every chapter natively, with what only TPU interpret
             mode shows on the host's CPU (grading/placement.py)
  stubs      `pytest exercises`: the stubs as shipped; every failure must be TODO (`not_todo` counts
             the rest)
  honest     the honest corpus (tests/honest/chNN/<variant>/), each variant set placed whole in a
             copy of the course as a learner's exercises/, the test files of the exercises it holds
             run natively (not the tests of a write-up beside them: the corpus has none)
  gates      `pytest exercises --gates --solutions --chip CHIP`, its rows to --records; the run adds its
             own line (run/gate_progress.py), to --out
Each line records the date, the device kind, JAX's and libtpu's versions, the commit whose code ran
(`--commit`: the device's copy of a working tree has no git; the script refuses a commit other than
HEAD where it can read git, and a tree with changes) and per chapter passed, failed, skipped and
seconds, read off pytest's JUnit XML. Logs and JUnit files go to --logs. Then docs/tpu.md's table
of the latest runs is written again from the file.

A device session may be shorter than the whole: `--chapters` runs a slice (the table takes each
chapter from the latest line that ran it), and `--budget SECONDS` starts no run once they are spent
and interrupts one still going at them (pytest's own Ctrl-C: its JUnit file and the gate run's line
are written, and the line says `stopped`). After a gate run the ceiling sweeps it made on the chip
join bench/tpu/ceiling-sweeps.jsonl (bench/course_sweeps.py), for later runs to reuse.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_tpucourse.gates import device_runs  # noqa: E402

TODO = "not written yet"  # the words of every stub's TODO report (grading/messages.py)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=device_runs.KINDS, default=list(device_runs.KINDS))
    parser.add_argument("--commit", default=None, help="the commit whose code runs (default: git HEAD)")
    parser.add_argument("--chip", default="v5e")
    parser.add_argument("--out", type=Path, default=REPO / device_runs.PATH)
    parser.add_argument("--logs", type=Path, default=None, help="folder for each run's log and JUnit XML")
    parser.add_argument("--records", type=Path, default=None, help="the gate run's records (default: in --logs)")
    parser.add_argument("--chapters", nargs="+", default=None, metavar="chNN",
                        help="only these chapters (a slice of the whole, for a short device session)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="start no run after this many seconds, and interrupt one still going then")
    parser.add_argument("--finish-searches", action="store_true",
                        help="the gate run continues the kept ceiling searches that spent their budget (pytest's option)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run and write nothing")
    args = parser.parse_args(argv)
    if args.chapters:
        unknown = [c for c in args.chapters if not (REPO / "exercises" / c).is_dir()]
        if unknown:
            parser.error(f"--chapters: no exercises/ folder for {', '.join(unknown)}")
    deadline = None if args.budget is None else time.monotonic() + args.budget
    logs = args.logs or Path(tempfile.mkdtemp(prefix="tpucourse-device-runs-"))
    logs.mkdir(parents=True, exist_ok=True)
    commit = args.commit or _git_head()
    if not args.dry_run:
        _check_commit(commit)
    if not re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit):
        raise SystemExit(f"--commit {commit}: the full 40-digit sha (git rev-parse HEAD)")
    facts = None if args.dry_run else _device_facts()
    for kind in args.kinds:
        for name, command, cwd in _runs(kind, args, logs):
            print("+", " ".join(command), f"(in {cwd})" if cwd != REPO else "", flush=True)
            if args.dry_run:
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left < MINIMUM_RUN:
                print(f"{name}: not started, {args.budget:.0f} s budget spent", flush=True)
                continue
            junit = logs / f"{name}.xml"
            started = time.monotonic()
            with open(logs / f"{name}.log", "wb") as log:
                code, stopped = run_within([*command, f"--junitxml={junit}"], left, cwd=cwd, stdout=log,
                                           stderr=subprocess.STDOUT, env=_environment(commit))
            seconds = time.monotonic() - started
            chapters = chapter_counts(junit, stubs=kind == "stubs")
            if kind != device_runs.GATES:  # a gate run adds its own line (run/gate_progress.py)
                device_runs.append(args.out, device_runs.DeviceRun(
                    date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    device_kind=facts["device_kind"], jax=facts["jax"], libtpu=facts["libtpu"], commit=commit,
                    kind=kind, seconds=round(seconds, 1), chapters=chapters,
                    variant=name.split("-", 1)[1] if kind == "honest" else None,
                    stopped=f"interrupted at the {args.budget:.0f} s budget" if stopped else None))
            else:
                _keep_the_runs_sweeps(cwd)
            print(f"{name}: exit {code}{' (interrupted: budget spent)' if stopped else ''}, {seconds:.0f} s; "
                  + ", ".join(
                f"{c} {v['passed']}/{v['failed']}/{v['skipped']}" + (f" ({v['not_todo']} not TODO)"
                                                                     if "not_todo" in v else "")
                for c, v in chapters.items()), flush=True)
    if not args.dry_run:
        docs = REPO / device_runs.DOCS
        runs, bad = device_runs.read(args.out)
        docs.write_text(device_runs.docs_with_table(docs.read_text(encoding="utf-8"), runs), encoding="utf-8")
        for line in bad:
            print(f"{args.out}: {line}", file=sys.stderr)
    return 0


MINIMUM_RUN = 30.0  # seconds: less than this left of the budget, a run is not started (start-up alone)
GRACE = 60.0  # seconds an interrupted pytest gets to write its JUnit file and lines before it is killed


def run_within(command: list[str], seconds: float | None, **popen) -> tuple[int, bool]:
    """Run a pytest command; past `seconds`, interrupt it as Ctrl-C would (pytest then finishes its
    session: JUnit XML, the gate run's line) and kill it after GRACE. The exit code, and whether it was
    interrupted."""
    process = subprocess.Popen(command, **popen)
    try:
        return process.wait(timeout=seconds), False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            return process.wait(timeout=GRACE), True
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait(), True


def _targets(args) -> list[str]:
    return [f"exercises/{c}" for c in args.chapters] if args.chapters else ["exercises"]


def _runs(kind: str, args, logs: Path):
    """(name, command, working directory) of each pytest run of a kind."""
    pytest = [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q", "-rfE",
              "--tb=short"]
    if kind == "solutions":
        yield kind, [*pytest, *_targets(args), "--solutions"], REPO
    elif kind == "stubs":
        yield kind, [*pytest, *_targets(args)], REPO
    elif kind == "gates":
        records = args.records or logs / "gates.records.jsonl"
        yield kind, [*pytest, *_targets(args), "--gates", "--solutions", f"--chip={args.chip}",
                     f"--records={records}", f"--device-runs={args.out}",
                     *(["--finish-searches"] if args.finish_searches else [])], REPO
    else:
        for variant in honest_variants(args.chapters):
            course = logs / f"course-{variant}"
            files = (_place_variant(variant, course, args.chapters) if not args.dry_run
                     else [f"exercises/chNN/test_<exercise>.py"])
            yield f"honest-{variant}", [*pytest, *files, *NOT_THE_CORPUS, "--jax-cache",
                                        str(REPO / ".tpucourse" / "jax-cache")], course


# A corpus holds kernels and the learner's files they need, never a write-up: the tests that grade a
# file beside an exercise's module (@pytest.mark.edits, chapter 15's WRITEUP.md) are not its to pass,
# and the course's stub of that file would fail them.
NOT_THE_CORPUS = ("-m", "not edits")


def _keep_the_runs_sweeps(course: Path) -> None:
    """The ceiling sweeps a gate run of the course's own made on the chip, into bench/tpu/ for later runs."""
    import course_sweeps

    kept = course / ".tpucourse" / "ceiling-sweeps.jsonl"
    if kept.exists():
        added = course_sweeps.add(course_sweeps.sweeps.read(kept)[0])
        print(f"{len(added)} ceiling sweep{'s' if len(added) != 1 else ''} added to {course_sweeps.COURSE}",
              flush=True)


def honest_variants(chapters=None) -> list[str]:
    return sorted({p.name for p in (REPO / "tests" / "honest").glob("ch*/*")
                   if p.is_dir() and (not chapters or p.parent.name in chapters)})


def _place_variant(variant: str, course: Path, chapters=None) -> list[str]:
    """A copy of the course whose exercises/chNN/ holds every chapter's `variant` set (of `chapters`,
    when given); the test files of the exercises it writes."""
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    for name in ("course.toml", "pyproject.toml", "conftest.py", "shipped.json"):
        shutil.copy2(REPO / name, course / name)
    for tree in ("exercises", "solutions"):
        shutil.copytree(REPO / tree, course / tree, ignore=shutil.ignore_patterns("__pycache__", ".tpucourse"))
    files = []
    for folder in sorted((REPO / "tests" / "honest").glob(f"ch*/{variant}")):
        chapter = folder.parent.name
        if chapters and chapter not in chapters:
            continue
        for path in sorted(folder.iterdir()):
            if path.is_file():
                shutil.copy2(path, course / "exercises" / chapter / path.name)
                test = course / "exercises" / chapter / f"test_{path.stem}.py"
                if path.suffix == ".py" and test.exists():
                    files.append(str(test.relative_to(course)))
    return files


def chapter_counts(junit: Path, *, stubs: bool = False) -> dict:
    """Per chapter: passed, failed, skipped and seconds (and for stubs, failures that are not TODO)."""
    counts: dict = {}
    try:
        root = ElementTree.parse(junit).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    for case in root.iter("testcase"):
        where = f"{case.get('classname', '')}.{case.get('file', '')}"
        found = re.search(r"\b(ch\d\d)\b", where.replace("/", "."))
        if found is None:
            continue
        c = counts.setdefault(found.group(1), {"passed": 0, "failed": 0, "skipped": 0, "seconds": 0.0,
                                              **({"not_todo": 0} if stubs else {})})
        c["seconds"] = round(c["seconds"] + float(case.get("time") or 0), 2)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            c["failed"] += 1
            if stubs and TODO not in (failure.get("message", "") + (failure.text or "")):
                c["not_todo"] += 1
        elif case.find("skipped") is not None:
            c["skipped"] += 1
        else:
            c["passed"] += 1
    return dict(sorted(counts.items()))


def _plugin_args() -> list[str]:
    """-p pytest_tpucourse.plugin where the course is not installed (run from the source tree)."""
    from importlib import metadata

    try:
        metadata.distribution("pytest-tpucourse")
        return []
    except metadata.PackageNotFoundError:
        return ["-p", "pytest_tpucourse.plugin"]


def _environment(commit: str) -> dict:
    """A learner's run's environment, the commit stated for a copy of the checkout without .git."""
    env = {**os.environ, "TPUCOURSE_WARM": "0", "TPUCOURSE_GIT_COMMIT": commit}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _device_facts() -> dict:
    """The device kind and versions, read in a process of their own (this one never holds the chip)."""
    code = ("import jax, json\nfrom importlib import metadata\n"
            "try:\n    libtpu = metadata.version('libtpu')\nexcept metadata.PackageNotFoundError:\n    libtpu = '?'\n"
            "print(json.dumps({'device_kind': jax.devices()[0].device_kind, 'jax': jax.__version__, "
            "'libtpu': libtpu}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    return json.loads(out.strip().splitlines()[-1])


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("no git here: give --commit, the commit whose code this tree holds") from None


def _check_commit(commit: str) -> None:
    """Where git holds the commit, the tree must be that commit's, unchanged. A copy of the checkout sent
    to a machine may carry no .git, or one older than its files (without the commit): nothing can be
    checked there, and the lines say the commit as stated (the gate rows, TPUCOURSE_GIT_COMMIT)."""
    sha = commit.removesuffix("-dirty")
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=REPO, capture_output=True)
    if known.returncode != 0:
        print(f"git here does not hold {sha[:10]}: the tree cannot be checked against it", file=sys.stderr)
        return
    changed = subprocess.run(["git", "diff", "--name-only", sha], cwd=REPO, capture_output=True,
                             text=True).stdout.strip()
    if changed and not commit.endswith("-dirty"):
        raise SystemExit(f"the tree differs from {sha}:\n{changed}")


if __name__ == "__main__":
    sys.exit(main())
