"""`tpucourse reset chNN.module`: put an exercise's stub back as shipped (git HEAD); the learner's
file is backed up under .tpucourse/backups/ first."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

from ..core.course import EXERCISES, Course, module_in_tree
from ..learner import state
from ..learner.requests import RequestError, course_here


def add_parser(subcommands):
    s = subcommands.add_parser("reset", help="put an exercise's stub back as shipped (your file is backed up)")
    s.add_argument("exercise", help="chNN.module, e.g. ch11.matmul")
    s.add_argument("--yes", action="store_true", help="overwrite without asking")
    return s


def run(args) -> int:
    stdin = sys.stdin
    course = course_here()
    chapter_id, _, name = args.exercise.partition(".")
    if not name or course.chapter(chapter_id) is None:
        raise RequestError(f"give chNN.module, e.g. ch11.matmul (got {args.exercise!r})")
    relative = module_in_tree(EXERCISES, chapter_id, name)
    target = course.root / relative
    stub = shipped_stub(course, relative)
    if target.exists() and target.read_bytes() == stub:
        print(f"{relative} is already as shipped")
        return 0
    if target.exists() and not args.yes:
        if not stdin.isatty():
            raise RequestError(f"{relative} holds your work: pass --yes to overwrite it "
                               "(it is backed up first); not asking on a non-interactive input")
        print(f"Overwrite {relative} with the shipped stub? Your version is backed up first. [y/N] ",
              end="", flush=True)
        if stdin.readline().strip().lower() not in ("y", "yes"):
            print("left as it is")
            return 1
    if target.exists():
        backups = course.root / state.STATE_DIR / "backups"
        backups.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        backup = backups / f"{chapter_id}.{name}-{stamp}.py"
        state.atomic_write_text(backup, target.read_text(encoding="utf-8"))
        print(f"your version is in {backup.relative_to(course.root)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    state.atomic_write_text(target, stub.decode("utf-8"))
    print(f"{relative} is back as shipped")
    return 0


def shipped_stub(course: Course, relative: str) -> bytes:
    """The file as committed in git HEAD."""
    try:
        inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=course.root,
                                capture_output=True, text=True)
    except FileNotFoundError:
        raise RequestError("reset needs git (the shipped stubs are the ones in git HEAD), "
                           "and git is not installed") from None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise RequestError(f"{course.root} is not a git checkout, so the shipped stub is unknown: "
                           "clone the course with git to use reset")
    shown = subprocess.run(["git", "show", f"HEAD:{relative}"], cwd=course.root, capture_output=True)
    if shown.returncode != 0:
        raise RequestError(f"{relative} is not in git HEAD: there is no shipped version to restore")
    return shown.stdout
