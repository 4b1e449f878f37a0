"""A hostile class graded by `tpucourse grade`, as an instructor runs it (the command in a process
of its own, its output path on its command line): tests/hostile_class.py builds the class.

Every hostile tree ends not done, with a reason; every classmate's files are byte for byte what
they were and graded as they would be alone; the gradebook, its JUnit files and its shards are
the grader's alone; 200 MB of output leave a gradebook under 1 MB. The trees whose lies live in
their own process (their results rewritten in memory, the checker's tolerance replaced, a
kernel with two faces, the expected value taken off the test's stack) pass their own pytest
run and are caught by the trusted check, whose worker runs in the same sandbox and whose
verdicts the grader computes; honest trees pass both. What a tree sends back that cannot be read
(a record or an answer nested 200,000 deep, a file in no text encoding) is its own row, and the
gradebook, its JUnit files and the similarity report are written whatever the trees did."""

import hashlib
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from pytest_tpucourse.classroom import gradebook, signing
from pytest_tpucourse.classroom.sandbox import SandboxUnavailable, find_isolation

from . import hostile_class
from .hostile_class import ESCAPE_NAME, FAULTY, HONEST, HOSTILE, SURVIVOR, survivors

pytestmark = pytest.mark.runs

REPO = Path(__file__).resolve().parents[1]
IN_PROCESS = ("h-results", "h-in-process", "h-hollow")  # what only a check outside the tree's process can catch
EVIDENCE = ("h-oracle",)  # right values from the course's own oracles: done, and in the similarity report
GRADE = ("--chapters", "ch01", "--jobs", "2", "--timeout", "600")


def _grade(*argv) -> subprocess.CompletedProcess:
    """`tpucourse grade ...` in a process of its own, in the course checkout."""
    command = [sys.executable, "-c", "import sys; from pytest_tpucourse.commands.main import main; sys.exit(main())",
               "grade", *map(str, argv)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)


def _digests(root: Path) -> dict[str, str]:
    """Every file under root (links as links), by its path."""
    found = {}
    for here, folders, files in os.walk(root):
        for name in [*files, *(f for f in folders if os.path.islink(os.path.join(here, f)))]:
            path = Path(here) / name
            found[str(path)] = (f"link {os.readlink(path)}" if path.is_symlink()
                                else hashlib.sha256(path.read_bytes()).hexdigest())
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded whole, then again in two shards: (trees, key, whole run, shards' paths, digests before)."""
    try:
        find_isolation()
    except SandboxUnavailable as error:
        pytest.skip(f"no sandbox here: {error}")
    root = tmp_path_factory.mktemp("hostile")
    trees = hostile_class.build(root / "class")
    key = root / "instructor" / "key"
    key.parent.mkdir()
    key.write_bytes(os.urandom(32))
    before = _digests(root / "class")
    out = root / "out" / "gradebook.json"
    whole = _grade(*trees.values(), *GRADE, "--key", key, "--junitxml", root / "out" / "junit", "--out", out)
    assert whole.returncode == 0, whole.stderr[-3000:]
    time.sleep(3)  # what a process left behind would do now, it would have done
    halves = [root / "shards" / f"shard-{k}.json" for k in (1, 2)]
    for k, half in enumerate(halves, 1):
        ran = _grade(*trees.values(), *GRADE, "--shard", f"{k}/2", "-q", "--key", key, "--out", half)
        assert ran.returncode == 0, ran.stderr[-3000:]
    return {"trees": trees, "key": key, "out": out, "whole": whole, "halves": halves, "before": before,
            "root": root}


def _book(graded) -> dict:
    return gradebook.read(graded["out"])


def _entries(graded, name: str) -> dict:
    return _book(graded)["trees"][str(graded["trees"][name])]


def test_every_hostile_tree_is_not_done_and_says_why(graded):
    for name in HOSTILE:
        if name in IN_PROCESS or name in EVIDENCE:
            continue
        for key, entry in _entries(graded, name).items():
            assert entry["status"] != "done" and entry["message"], (name, key, entry)
    assert {e["status"] for e in _entries(graded, "h-overwrite").values()} == {"todo"}
    assert {e["status"] for e in _entries(graded, "h-reads").values()} == {"todo"}  # no classmate, no solution
    assert {e["status"] for e in _entries(graded, "h-gradebook").values()} == {"todo"}
    flood = _entries(graded, "h-flood")
    assert {e["status"] for e in flood.values()} == {"crashed"}
    assert "exit status 3" in flood["ch01.softmax"]["message"]
    linked = _entries(graded, "h-symlink")["ch01.softmax"]
    assert linked["status"] == "failed" and linked["message"].startswith("not graded: ch01 is a link to ../alice/ch01")
    assert _book(graded)["runs"][str(graded["trees"]["h-symlink"])]["outcome"] == "refused"


def test_a_record_nested_too_deep_is_its_trees_own_crashed_row(graded):
    """200,000 nested lists for an end-of-run record (json.loads raises RecursionError): h-deep's
    row, crashed, saying why; the class's gradebook is written and exits 0."""
    deep = _entries(graded, "h-deep")
    assert {e["status"] for e in deep.values()} == {"crashed"}
    assert "unreadable end-of-run record: nested deeper than the 8 levels read" in deep["ch01.norms"]["message"]
    assert _book(graded)["runs"][str(graded["trees"]["h-deep"])]["outcome"] == "crashed"


def test_lies_in_the_trees_own_process_pass_their_run_and_are_not_done_by_the_trusted_check(graded):
    assert _book(graded)["course"]["trusted_check"] is True
    for name in IN_PROCESS:
        for key, entry in _entries(graded, name).items():
            assert entry["status"] == "failed" and entry["passed"] == entry["total"] > 0, (name, key, entry)
            assert entry["message"].startswith("its tests passed in its own process, but the trusted check "
                                               "disagrees: "), (name, key, entry)
            assert entry["trusted"]["verdict"] == "disagrees" and entry["trusted"]["cases"] > 0
    results = _entries(graded, "h-results")  # the stubs, their results rewritten in memory
    assert all("TODO" in entry["message"] for entry in results.values())
    lies = _entries(graded, "h-in-process")  # two faces, the tolerance replaced, the reference off the stack
    assert "output is wrong" in lies["ch01.softmax"]["message"]


def test_answers_that_carry_no_values_are_not_answers(graded):
    """h-hollow's run says in memory that it passed; its worker answers with parts that cover nothing
    (an object of its own making, `plain` replaced to give arrays over no device) and with 200,000
    nested lists: each disagrees, saying why, and the class's grading goes on."""
    hollow = _entries(graded, "h-hollow")
    assert "returned what the trusted check cannot read: a types.SimpleNamespace is not plain data" in \
        hollow["ch01.softmax"]["message"]
    assert "carries no values: no device holds any of it" in hollow["ch01.norms"]["message"]
    assert "does not read: the header is not JSON within limits: nested deeper" in hollow["ch01.attention"]["message"]


def test_honest_trees_agree_with_the_trusted_check(graded):
    for name in ("alice", "bob"):
        assert {e["trusted"]["verdict"] for e in _entries(graded, name).values()} == {"agrees"}
    carol = _entries(graded, "carol")  # its softmax is wrong over 3-D arrays, which its pytest run finds
    assert carol["ch01.norms"]["trusted"]["verdict"] == carol["ch01.attention"]["trusted"]["verdict"] == "agrees"


def test_every_classmates_files_are_untouched_and_graded_as_before(graded):
    assert _digests(graded["root"] / "class") == graded["before"]
    statuses = {name: {k: e["status"] for k, e in _entries(graded, name).items()} for name in (*HONEST, *FAULTY)}
    assert statuses == {
        "alice": dict.fromkeys(statuses["alice"], "done"), "bob": dict.fromkeys(statuses["bob"], "done"),
        "bob!": dict.fromkeys(statuses["bob!"], "todo"),
        "carol": {"ch01.softmax": "failed", "ch01.norms": "done", "ch01.attention": "done"},
        "dave": dict.fromkeys(statuses["dave"], "todo"),
        "exits": dict.fromkeys(statuses["exits"], "crashed"), "thread": dict.fromkeys(statuses["thread"], "timeout"),
        "skips": dict.fromkeys(statuses["skips"], "failed")}
    alice = _entries(graded, "alice")
    counts = [(e["passed"], e["total"]) for e in alice.values()]
    assert all(passed == total > 0 for passed, total in counts)
    assert counts == [(e["passed"], e["total"]) for e in _entries(graded, "bob").values()]  # the same files
    assert "called pytest.skip()" in _entries(graded, "skips")["ch01.softmax"]["message"]


def test_the_gradebook_and_its_junit_files_are_the_graders_alone(graded):
    assert not survivors(SURVIVOR)  # the process h-gradebook started in a session of its own
    book = _book(graded)
    assert signing.problem(book, graded["key"].read_bytes()) == ""  # as the grader wrote it
    assert book["course"]["isolation"] == "bubblewrap" and book["course"]["hypothesis_profile"] == "ci"
    junit = graded["out"].parent / "junit"
    files = {path.name: ElementTree.parse(path).getroot()[0] for path in junit.iterdir()}
    assert len(files) == len(graded["trees"])  # bob's and bob!'s among them: a file each
    by_tree = {suite.get("name"): suite for suite in files.values()}
    assert by_tree[str(graded["trees"]["bob"])].get("failures") == "0"
    assert by_tree[str(graded["trees"]["bob!"])].get("failures") == "3"
    suite = by_tree[str(graded["trees"]["h-gradebook"])]
    assert (suite.get("tests"), suite.get("failures")) == ("3", "3")  # not the 23 passed the tree wrote
    thread = by_tree[str(graded["trees"]["thread"])]
    assert thread.get("errors") == "3" and "timeout" in thread[0][0].get("message")
    assert all("\x1b" not in name for name in by_tree)


def test_a_tree_name_with_escape_codes_reaches_no_terminal_nor_spreadsheet(graded, tmp_path):
    printed = graded["whole"].stdout + graded["whole"].stderr
    assert "\x1b" not in printed and "\x07" not in printed
    assert "h-escape\\x1b[2J\\x1b[H\\x1b]0;owned\\x07" in printed
    csv = tmp_path / "book.csv"
    ran = _grade("--merge", graded["out"], "--key", graded["key"], "-q", "--out", csv)
    assert ran.returncode == 0, ran.stderr
    assert "\x1b" not in csv.read_text() and "\x07" not in csv.read_text()
    assert str(graded["trees"][ESCAPE_NAME]) in _book(graded)["trees"]  # the JSON keeps the name as it is


def test_two_hundred_megabytes_of_output_leave_a_gradebook_under_a_megabyte(graded):
    assert graded["out"].stat().st_size < 1 << 20
    log = _book(graded)["runs"][str(graded["trees"]["h-flood"])]["log"]
    assert 0 < len(log) <= 41 and any("lines left out" in line for line in log)
    assert all(len(line) < 1000 for line in log)


def test_the_merged_shards_equal_the_whole_run_and_a_forged_shard_is_refused(graded, tmp_path):
    merged = tmp_path / "merged.json"
    ran = _grade("--merge", *graded["halves"], "--key", graded["key"], "-q", "--out", merged)
    assert ran.returncode == 0, ran.stderr

    def without_times(book):
        trees = {t: {k: {**e, "seconds": None} for k, e in entries.items()} for t, entries in book["trees"].items()}
        return {"course": book["course"], "trees": trees,
                "runs": {t: {**r, "seconds": None, "log": None} for t, r in book["runs"].items()}}

    assert without_times(gradebook.read(merged)) == without_times(_book(graded))
    assert gradebook.read(merged)["class"] == _book(graded)["class"] and gradebook.read(merged)["shard"] is None
    alone = _grade("--merge", graded["halves"][1], "--key", graded["key"], "-q", "--out", tmp_path / "alone.json")
    assert alone.returncode == 2 and "shard 2 of 2 given, of one grading: 1/2 missing" in alone.stderr
    mixed = _grade("--merge", graded["out"], graded["halves"][0], "--key", graded["key"], "-q",
                   "--out", tmp_path / "mixed.json")
    assert mixed.returncode == 2 and "is the whole class's gradebook: it merges with no other" in mixed.stderr
    assert not (tmp_path / "alone.json").exists() and not (tmp_path / "mixed.json").exists()
    forged = tmp_path / "shard-2.json"
    text = graded["halves"][1].read_text()
    forged.write_text(text.replace('"status": "todo"', '"status": "done"'))
    assert forged.read_text() != text
    ran = _grade("--merge", graded["halves"][0], forged, "--key", graded["key"], "-q", "--out", tmp_path / "x.json")
    assert ran.returncode == 2 and "refused: its digest does not verify" in ran.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_similarity_report_beside_the_gradebook_is_evidence_not_a_verdict(graded):
    report = json.loads((graded["out"].parent / "gradebook.similarity.json").read_text())
    assert "never a verdict" in report["note"]
    tree = {str(path): name for name, path in graded["trees"].items()}
    pairs = {tuple(sorted(tree[str(Path(f).parents[1])] for f in p["files"])) for p in report["pairs"]}
    assert ("alice", "bob") in pairs and not any("h-symlink" in pair for pair in pairs)
    assert {tree[str(Path(p["file"]).parents[1])] for p in report["like_solutions"]} >= {"alice", "bob"}
    reaching = {tree[str(Path(p["file"]).parents[1])]: p["how"] for p in report["reach_the_course"]}
    assert any("names pytest_tpucourse.references" in how for how in reaching["h-oracle"])  # done in the gradebook
    assert _entries(graded, "h-oracle")["ch01.softmax"]["status"] == "done"
    assert {"h-in-process", "h-results", "h-hollow"} <= set(reaching) and not {"alice", "bob", "dave"} & set(reaching)
    assert report["not_read"] == [{"file": str(graded["trees"]["h-deep"] / "ch01" / "softmax.py"),
                                   "why": "Python cannot read it as source (LookupError: 'rot13' is not a text "
                                          "encoding; use codecs.decode() to handle arbitrary codecs)"}]
