"""`.tpucourse/watch-history.json`: how each graded test fared in the watch's runs and how long
it took, and which test a save runs first (`first_test`): the one it most likely broke.

In order:
1. the last failure: a test that failed in the last run it ran in (of several, the most
   telling, telling.py, then the fastest);
2. the fastest discriminating test: one that has caught a mistake of this learner's, that is,
   failed (not as TODO) in a run where another test of its file passed; the least time first;
3. with nothing known, the first test in the file's own order (graded files open with their
   main value check).
A test's time is that of its setup, call and teardown, kept only from runs where it reached a
verdict (a TODO ends at once and says nothing of the kernel's cost); the least of its last few
times counts, since the test a run starts with also pays that run's warm-up.

The file is a cache of the watch's own: unreadable or malformed, it is started afresh, never
an error. It also holds the latest run's failures (`last_run`), for the watcher to show the
most telling one with its report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.small_files import UnreadableFile, read_text
from . import telling
from .state import STATE_DIR, atomic_write_text

HISTORY_FILE = "watch-history.json"
VERSION = 1
MAX_BYTES = 4 * 1024 * 1024
TIMES_KEPT = 5  # a test's last verdict times; the least of them is its time
TESTS_KEPT = 2000  # tests not seen for longest are forgotten past this many
REPORT_CHARS = 4000  # of a failure's report kept for the watcher to show

PASSED, FAILED, TODO, SKIPPED = "passed", "failed", "todo", "skipped"


def history_path(course_root: Path) -> Path:
    return Path(course_root) / STATE_DIR / HISTORY_FILE


def empty() -> dict:
    return {"version": VERSION, "runs": 0, "tests": {}, "last_run": {}}


def read(course_root: Path) -> dict:
    """The history, or an empty one (none yet, or one this version cannot read)."""
    try:
        text = read_text(history_path(course_root), MAX_BYTES)
        data = json.loads(text) if text is not None else None
    except (UnreadableFile, json.JSONDecodeError):
        data = None
    if not (isinstance(data, dict) and data.get("version") == VERSION and isinstance(data.get("tests"), dict)
            and isinstance(data.get("runs"), int)):
        return empty()
    data["tests"] = {nodeid: entry for nodeid, entry in data["tests"].items() if _well_formed(entry)}
    if not isinstance(data.get("last_run"), dict):
        data["last_run"] = {}
    return data


def _well_formed(entry) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("seconds", []), list)
            and all(isinstance(s, (int, float)) for s in entry.get("seconds", []))
            and isinstance(entry.get("caught", 0), int) and isinstance(entry.get("last", ""), str)
            and isinstance(entry.get("headline", ""), str))


@dataclass(frozen=True)
class RanTest:
    """What one test did in a run."""

    nodeid: str
    outcome: str  # PASSED, FAILED, TODO or SKIPPED
    seconds: float = 0.0  # setup + call + teardown
    headline: str = ""  # a failure's one line
    report: str = ""  # a failure's whole report


@dataclass(frozen=True)
class FirstTest:
    nodeid: str
    why: str  # in a sentence: "it failed last time"


def first_test(history: dict, nodeids: list[str]) -> FirstTest | None:
    """Of the tests a run collected (in the order they would run), the one to run first."""
    if not nodeids:
        return None
    tests = history.get("tests", {})
    known = {nodeid: tests[nodeid] for nodeid in nodeids if nodeid in tests}
    failed = [nodeid for nodeid, entry in known.items() if entry.get("last") == FAILED]
    if failed:
        order = telling.by_telling(sorted(failed, key=lambda n: _seconds(known[n])),
                                   headline=lambda n: known[n].get("headline", ""))
        return FirstTest(order[0], "it failed last time")
    caught = [nodeid for nodeid, entry in known.items() if entry.get("caught", 0) > 0 and entry.get("seconds")]
    if caught:
        fastest = min(caught, key=lambda n: _seconds(known[n]))
        return FirstTest(fastest, f"the fastest test that has caught a mistake of yours, "
                                  f"{_seconds(known[fastest]):.1f} s")
    return FirstTest(nodeids[0], "the file's first test: no earlier run says which test an edit breaks")


def _seconds(entry: dict) -> float:
    times = entry.get("seconds") or []
    return min(times) if times else float("inf")


def record_run(course_root: Path, results: list[RanTest], token: str | None) -> dict:
    """Add one run's results (in the order the tests ran) to the history and write it."""
    history = read(course_root)
    history["runs"] += 1
    tests = history["tests"]
    passed_in = {_file(r.nodeid) for r in results if r.outcome == PASSED}
    for result in results:
        entry = tests.setdefault(result.nodeid, {"seconds": [], "caught": 0})
        entry["last"] = result.outcome
        entry["seen"] = history["runs"]
        entry["headline"] = result.headline if result.outcome == FAILED else ""
        if result.outcome in (PASSED, FAILED):
            entry["seconds"] = [*entry.get("seconds", []), round(result.seconds, 3)][-TIMES_KEPT:]
        if result.outcome == FAILED and _file(result.nodeid) in passed_in:
            entry["caught"] = entry.get("caught", 0) + 1
    if len(tests) > TESTS_KEPT:
        for nodeid in sorted(tests, key=lambda n: tests[n].get("seen", 0))[:len(tests) - TESTS_KEPT]:
            del tests[nodeid]
    history["last_run"] = {
        "token": token,
        "failures": [{"nodeid": r.nodeid, "headline": r.headline, "report": r.report[:REPORT_CHARS],
                      "todo": r.outcome == TODO}
                     for r in results if r.outcome in (FAILED, TODO)],
    }
    path = history_path(course_root)
    path.parent.mkdir(exist_ok=True)
    atomic_write_text(path, json.dumps(history, indent=1, sort_keys=True) + "\n")
    return history


def last_run_failures(course_root: Path, token: str) -> list[dict] | None:
    """The failures of the run that wrote `token` (in the order they ran), or None when the
    history holds another run's (that run ended before it wrote its own)."""
    last = read(course_root).get("last_run", {})
    if last.get("token") != token or not isinstance(last.get("failures"), list):
        return None
    return [f for f in last["failures"] if isinstance(f, dict) and isinstance(f.get("nodeid"), str)]


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]
