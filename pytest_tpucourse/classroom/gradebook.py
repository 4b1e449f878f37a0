"""The gradebook: every tree's exercises, as JSON (or CSV), merged from shards, summarised.

    {"format": 3,
     "course": {"commit": "<git HEAD of the course; null in a folder inside another repository>",
                "chapters": ["ch01", ...],
                "isolation": "bubblewrap" | "none", "hypothesis_profile": "ci"},
     "class": {"trees": n, "digest": "<sha256 of the sorted names of every tree named>"},
     "shard": null | {"parts": [k, ...], "of": n},
     "trees": {TREE: {"ch01.softmax": {"status": "done" | "failed" | "todo" | "crashed" | "timeout",
                                      "passed": n, "total": n, "seconds": s, "message": "...",
                                      "trusted": {"verdict": "agrees" | "disagrees" | "not checkable",
                                                  "cases": n, "reason": "..."}}}},
     "runs": {TREE: {"outcome": "finished" | "crashed" | "timeout" | "refused",
                     "exit_status": n | null, "seconds": s, "log": [...]}},
     "digest": {"hmac-sha256": "..."}}

An exercise is "done" only when every one of its graded tests ran and passed: a skipped
test is not a passed one, and a tree whose process crashed, timed out or was refused has no
exercise done, whatever it printed. Where the grading ran the trusted check (trusted_check.py,
`course.trusted_check`), it is done only when that check agrees too: an exercise whose tests
passed but whose values, judged outside the tree's process, disagree is "failed", its message
saying so and why; `trusted` keeps each exercise's verdict. Trees are in sorted order and
exercises in course order, so a gradebook is the same text whichever way it was put together:
merging the shards' gradebooks gives exactly the unsharded one. `class` and `shard` say which
grading a gradebook is part of (shards.py): merging takes one grading's shards, every one of them
(or a partial merge that names those left out), never a gradebook of another grading.

Only the grader writes it, after every tree's processes have ended; what a tree said is
bounded there (a message: MESSAGE_CHARS; a crashed run's log: its first and last lines,
bounded_log.py) and escaped where shown (the table, CSV: escaping.py; a tree name beyond ASCII with its
code points, so that names that print alike are told apart). `digest`, when the
grading had the instructor's key, is its HMAC (signing.py): `merge` refuses a gradebook
that does not verify.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

from ..core import untrusted_json
from ..core.course import Course
from ..core.course_git import is_repository_root
from ..learner.status import Status
from . import shards, signing
from .escaping import for_csv, tree_name, tree_name_for_csv
from .runner import TreeRun

FORMAT = 3
STATUSES = ("done", "failed", "todo", "crashed", "timeout")
MESSAGE_CHARS = 500  # of a message from a tree's run: its headline, not what the tree chose to print
NORMAL_EXIT = (0, 1)  # pytest: all passed, some failed
CSV_COLUMNS = ("tree", "exercise", "status", "passed", "total", "seconds", "message")
BOOK_DEPTH = 8  # a gradebook nests 4 deep (trees, a tree, an exercise, its verdict)


class GradebookError(ValueError):
    """A gradebook that cannot be read or merged."""


def course_facts(course: Course, chapters, **grading) -> dict:
    """What every shard's gradebook must agree on: the course's commit, the chapters graded, and
    how they were graded (`grading`: isolation, the sandbox.Isolation.kind; hypothesis_profile;
    trusted_check, whether the values were also judged outside each tree's process)."""
    commit = None
    if is_repository_root(course.root):  # a course inside another repository has no commit of its own
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=course.root, capture_output=True,
                                    text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"commit": commit, "chapters": list(chapters), **grading}


def graded_exercises(course: Course, chapters) -> list[str]:
    """The exercises the gradebook lists, in course order: those of the chapters with graded tests."""
    return [e.key for c in course.chapters if c.id in chapters for e in c.exercises
            if (course.root / e.test_path).is_file()]


def tree_entries(exercises: list[str], run: TreeRun) -> dict[str, dict]:
    """Each exercise's entry for one tree's run."""
    if not run.finished:
        status = "failed" if run.outcome == "refused" else run.outcome
        return {key: _entry(status, 0, 0, 0.0, run.message) for key in exercises}
    record = run.record
    try:
        if record.get("threads_left"):  # ended by the plugin: on its own the process would run past any limit
            why = f"a thread never ends: {'; '.join(map(str, record['threads_left']))}"
            return {key: _entry("timeout", 0, 0, 0.0, why) for key in exercises}
        raw = record.get("exercises", {})
        errors = record.get("collection_errors", [])
        entries = {key: _from_record(raw.get(key), record.get("exitstatus"), errors) for key in exercises}
    except Exception as error:  # a record changed in the tree's process: whatever it holds, its own row
        why = f"its end-of-run record is not as the plugin writes it ({type(error).__name__}: {error})"
        return {key: _entry("crashed", 0, 0, 0.0, why) for key in exercises}
    if run.trusted is not None:
        entries = {key: with_trusted(entry, run.trusted.get(key)) for key, entry in entries.items()}
    return entries


def with_trusted(entry: dict, verdict: dict | None) -> dict:
    """An exercise's entry with the trusted check's verdict: done only where it agrees (or where
    the exercise has nothing it can check); where the two disagree, the message says which and why."""
    if verdict is None:
        verdict = {"verdict": "not checkable", "cases": 0, "reason": "the trusted check did not reach it"}
    verdict = {**verdict, "reason": bounded(verdict.get("reason", ""))}
    entry = {**entry, "trusted": verdict}
    if entry["status"] == "done" and verdict["verdict"] == "disagrees":
        entry["status"] = "failed"
        entry["message"] = bounded(f"its tests passed in its own process, but the trusted check disagrees: "
                                   f"{verdict['reason']}")
    elif entry["status"] == "failed" and verdict["verdict"] == "agrees":
        entry["message"] = bounded(f"{entry['message']} (its values, judged outside its process, agree)")
    return entry


def _from_record(raw: dict | None, exitstatus: int, collection_errors: list[dict]) -> dict:
    if raw is None:
        why = next((e["message"] for e in collection_errors if e.get("message")), "")
        return _entry("failed", 0, 0, 0.0, f"collection failed: {why}" if why else "no graded test of it ran")
    passed, total, seconds = int(raw["passed"]), int(raw["total"]), float(raw["seconds"])
    if not (0 <= passed <= total and 0.0 <= seconds < float("inf")):
        raise ValueError(f"counts {passed} of {total} in {seconds} s")
    status, message, skipped = raw["status"], raw.get("message", ""), int(raw.get("skipped", 0))
    if status == Status.TODO:
        return _entry("todo", passed, total, seconds, message)
    if status == Status.FAILED:
        return _entry("failed", passed, total, seconds, message)
    if status == Status.NOT_COUNTED:
        return _entry("failed", passed, total, seconds, f"not counted: {raw.get('not_counted') or 'see docs/earned.md'}")
    if status == Status.DONE and passed == total and not skipped:
        return _entry("done", passed, total, seconds, "")
    if skipped:
        return _entry("failed", passed, total, seconds,
                      f"{skipped} of {total} tests skipped: {raw.get('skip_reason', '')}".rstrip(": "))
    if exitstatus not in NORMAL_EXIT:
        return _entry("crashed", passed, total, seconds,
                      f"the run stopped (pytest exit status {exitstatus}) before its tests finished")
    return _entry("failed", passed, total, seconds, f"{passed} of {total} tests ran and passed")


def _entry(status: str, passed: int, total: int, seconds: float, message: str) -> dict:
    return {"status": status, "passed": passed, "total": total, "seconds": round(seconds, 2),
            "message": bounded(message)}


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text) - limit} characters cut]"


def run_entry(run: TreeRun) -> dict:
    """How the tree's process ended; a crash or timeout keeps its log's first and last lines."""
    return {"outcome": run.outcome, "exit_status": run.returncode, "seconds": run.seconds,
            "log": [bounded(line) for line in run.log] if not run.finished else []}


def build(course: dict, exercises: list[str], runs: dict[str, TreeRun], *, of_class: dict | None = None,
          shard: dict | None = None) -> dict:
    """The gradebook of these trees' runs (course: course_facts). of_class: shards.class_facts of every
    tree named (default: these); shard: shards.held(K, N) for one shard (None: the whole class)."""
    return normalised({"format": FORMAT, "course": course, "class": of_class or shards.class_facts(runs),
                       "shard": shard,
                       "trees": {name: tree_entries(exercises, run) for name, run in runs.items()},
                       "runs": {name: run_entry(run) for name, run in runs.items()}})


def normalised(book: dict) -> dict:
    """Trees sorted; the same object whatever order they were graded or merged in (unsigned)."""
    trees, runs = book["trees"], book["runs"]
    return {"format": book["format"], "course": book["course"], "class": book["class"], "shard": book["shard"],
            "trees": {name: trees[name] for name in sorted(trees)},
            "runs": {name: runs[name] for name in sorted(runs)}}


def merge(books: list[dict], secret: bytes | None = None, names: list[str] | None = None,
          without: tuple[tuple[int, int], ...] = ()) -> dict:
    """One gradebook of one grading's shards: the same course, chapters and grading, the same class,
    each shard once and every shard of it, or those left out named in `without` ((K, N) each: a
    partial merge), no tree twice; with the instructor's key (`secret`), each must verify (names:
    the files, for the messages)."""
    if not books:
        raise GradebookError("nothing to merge")
    names = names or [f"gradebook {i + 1}" for i in range(len(books))]
    first = books[0]
    for name, book in zip(names, books):
        if secret is not None and (why := signing.problem(book, secret)):
            raise GradebookError(f"{name}: refused: {why}")
        if book.get("format") != FORMAT:
            raise GradebookError(f"{name}: gradebook format {book.get('format')!r}: this version reads {FORMAT} "
                                 f"(grade again with this version)")
        if book["course"] != first["course"]:
            raise GradebookError(f"gradebooks of different courses, chapters or grading: {first['course']} and "
                                 f"{book['course']}")
        if book["class"] != first["class"]:
            raise GradebookError(f"gradebooks of two gradings: {names[0]} is of a class of {first['class']['trees']} "
                                 f"trees ({first['class']['digest'][:12]}), {name} of {book['class']['trees']} "
                                 f"({book['class']['digest'][:12]})")
    try:
        shard = shards.merged_set([(name, book["shard"]) for name, book in zip(names, books)], first["class"],
                                  {name: list(book["trees"]) for name, book in zip(names, books)}, without)
    except shards.ShardSetError as error:
        raise GradebookError(str(error)) from None
    trees, runs = {}, {}
    for book in books:
        twice = sorted(set(trees) & set(book["trees"]))
        if twice:
            raise GradebookError(f"trees graded in two gradebooks: {', '.join(twice)}")
        trees.update(book["trees"])
        runs.update(book["runs"])
    return normalised({"format": FORMAT, "course": first["course"], "class": first["class"], "shard": shard,
                       "trees": trees, "runs": runs})


def dumps(book: dict, path: Path | str = "gradebook.json") -> str:
    """The gradebook as written to `path`: CSV when it ends in .csv, else JSON."""
    if str(path).endswith(".csv"):
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for tree, exercises in book["trees"].items():
            for key, entry in exercises.items():
                writer.writerow([tree_name_for_csv(tree), key, *(entry[c] for c in CSV_COLUMNS[2:-1]),
                                 for_csv(entry["message"])])
        return out.getvalue()
    return json.dumps(book, indent=2) + "\n"


def write(book: dict, path: Path | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(dumps(book, path), encoding="utf-8")
    partial.replace(path)


def read(path: Path | str) -> dict:
    """A gradebook written as JSON (CSV gradebooks lack the course facts: merge the JSON ones)."""
    if str(path).endswith(".csv"):
        raise GradebookError(f"{path}: merge reads JSON gradebooks (write the shards with --out X.json)")
    try:
        book = untrusted_json.loads(Path(path).read_bytes(), depth=BOOK_DEPTH)
    except (OSError, untrusted_json.JsonError) as error:
        raise GradebookError(f"{path}: {error}") from None
    if not isinstance(book, dict) or not {"course", "trees", "runs"} <= set(book):
        raise GradebookError(f"{path}: not a gradebook (no course, trees and runs)")
    if book.get("format") == FORMAT and not ({"class", "shard"} <= set(book) and isinstance(book["class"], dict)):
        raise GradebookError(f"{path}: not a gradebook (no class and shard)")
    return book


def sign(book: dict, secret: bytes | None) -> dict:
    """The gradebook with its digest under the instructor's key (unchanged without one)."""
    return book if secret is None else signing.sign(book, secret)


def summary_lines(book: dict, chapters_of: dict[str, str]) -> list[str]:
    """Per tree: exercises and chapters done, time, and how its process ended if not by itself.
    chapters_of: exercise key -> chapter id."""
    names = list(book["trees"])
    shown = {name: tree_name(name) for name in names}
    width = max([len("tree"), *(len(n) for n in shown.values())])
    lines = [f"{'tree':<{width}}  exercises  chapters  {'time':>8}  "]
    for name in names:
        entries = book["trees"][name]
        done = sum(1 for e in entries.values() if e["status"] == "done")
        chapters = sorted({chapters_of[k] for k in entries})
        complete = sum(1 for c in chapters
                       if all(e["status"] == "done" for k, e in entries.items() if chapters_of[k] == c))
        run = book["runs"][name]
        note = "" if run["outcome"] == "finished" else run["outcome"]
        if not note:
            counts = {s: sum(1 for e in entries.values() if e["status"] == s) for s in STATUSES[1:]}
            note = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        lines.append(f"{shown[name]:<{width}}  {f'{done}/{len(entries)}':>9}  {f'{complete}/{len(chapters)}':>8}  "
                     f"{run['seconds']:>7.1f}s  {note}".rstrip())
    return [line.rstrip() for line in lines]
