"""`tpucourse grade`: a tree's sandbox, its run's record, the gradebook and its digest, shards, JUnit,
the similarity report, progress. A whole class graded for real: tests/test_hostile_class.py."""

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from pytest_tpucourse.classroom import gradebook, junit, runner, sandbox, shards, signing, similarity
from pytest_tpucourse.classroom.bounded_log import BoundedLog
from pytest_tpucourse.classroom.escaping import for_csv, for_terminal
from pytest_tpucourse.classroom.progress_line import ProgressLine
from pytest_tpucourse.classroom.record import FORMAT, TOKEN_FD_ENV
from pytest_tpucourse.classroom.runner import TreeRun
from pytest_tpucourse.commands import main
from pytest_tpucourse.core import plain_data
from pytest_tpucourse.core.course import load_course

from .hostile_class import survivors

REPO = Path(__file__).resolve().parents[1]
CH01 = ("ch01.softmax", "ch01.norms", "ch01.attention")
COURSE = {"commit": "abc", "chapters": ["ch01"], "isolation": "bubblewrap", "hypothesis_profile": "ci"}
KEY = b"the instructor's key"


# ------------------------------------------------------------------ shards


def test_shards_split_the_sorted_trees_stably_and_completely():
    trees = [f"trees/s{i:02d}" for i in range(11)]
    parts = [shards.shard(reversed(trees), k, 3) for k in (1, 2, 3)]
    assert sorted(t for part in parts for t in part) == trees  # each tree once
    assert parts[0] == ["trees/s00", "trees/s03", "trees/s06", "trees/s09"]
    assert parts == [shards.shard(trees, k, 3) for k in (1, 2, 3)]  # whatever order they were given in
    assert shards.shard(["a"], 2, 2) == []


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", ""])
def test_a_bad_shard_says_how_to_write_one(text):
    with pytest.raises(ValueError, match="--shard"):
        shards.parse(text)


# ------------------------------------------------------------------ the gradebook


def _exercise(status, passed, total, *, skipped=0, message="", skip_reason=""):
    return {"status": status, "total": total, "passed": passed, "failed": 0, "todo": 0, "skipped": skipped,
            "deselected": 0, "seconds": 1.5, "message": message, "skip_reason": skip_reason}


def _finished(tree, exercises, exitstatus=0):
    record = {"format": FORMAT, "token": "t", "exitstatus": exitstatus, "exercises": exercises,
              "collection_errors": []}
    return TreeRun(tree, "finished", 3.0, exitstatus, record=record)


def _class_runs():
    return {
        "trees/done": _finished("trees/done", {k: _exercise("done", 4, 4) for k in CH01}),
        "trees/todo": _finished("trees/todo", {k: _exercise("todo", 0, 4, message="TODO: write it") for k in CH01}, 1),
        "trees/skips": _finished("trees/skips", {k: _exercise("not run", 0, 4, skipped=4, skip_reason="not today")
                                                 for k in CH01}),
        "trees/some-skipped": _finished("trees/some-skipped", {k: _exercise("done", 3, 4, skipped=1) for k in CH01}),
        "trees/crash": TreeRun("trees/crash", "crashed", 2.0, 0, message="ended without its record", log=("boom",)),
        "trees/hang": TreeRun("trees/hang", "timeout", 9.0, None, message="ran past its limit"),
        "trees/half": _finished("trees/half", {"ch01.softmax": _exercise("done", 4, 4)}),
        "trees/void": _finished("trees/void", {k: {**_exercise("not counted", 4, 4), "not_counted": "a plugin"}
                                               for k in CH01}),
        "trees/linked": TreeRun("trees/linked", "refused", 0.0, None, message="not graded: ch01 is a link"),
    }


def _status(book, tree):
    return {key: entry["status"] for key, entry in book["trees"][tree].items()}


def test_only_every_test_passed_is_done_and_a_crash_timeout_or_refusal_never_is():
    book = gradebook.build(COURSE, list(CH01), _class_runs())
    assert _status(book, "trees/done") == dict.fromkeys(CH01, "done")
    assert _status(book, "trees/todo") == dict.fromkeys(CH01, "todo")
    assert _status(book, "trees/skips") == dict.fromkeys(CH01, "failed")  # skipped is not passed
    assert book["trees"]["trees/skips"]["ch01.norms"]["message"] == "4 of 4 tests skipped: not today"
    assert _status(book, "trees/some-skipped") == dict.fromkeys(CH01, "failed")
    assert _status(book, "trees/crash") == dict.fromkeys(CH01, "crashed")
    assert _status(book, "trees/hang") == dict.fromkeys(CH01, "timeout")
    assert _status(book, "trees/half") == {"ch01.softmax": "done", "ch01.norms": "failed", "ch01.attention": "failed"}
    assert _status(book, "trees/void") == dict.fromkeys(CH01, "failed")  # passed, but not as the course grades
    assert book["trees"]["trees/void"]["ch01.norms"]["message"] == "not counted: a plugin"
    assert _status(book, "trees/linked") == dict.fromkeys(CH01, "failed")
    assert book["trees"]["trees/linked"]["ch01.softmax"]["message"] == "not graded: ch01 is a link"
    assert book["runs"]["trees/crash"] == {"outcome": "crashed", "exit_status": 0, "seconds": 2.0, "log": ["boom"]}
    assert list(book["trees"]) == sorted(book["trees"])
    assert list(book["trees"]["trees/done"]) == list(CH01)  # course order


def test_a_message_from_a_tree_is_bounded_and_a_record_it_changed_is_a_crash():
    runs = {"trees/long": _finished("trees/long", {k: _exercise("failed", 0, 4, message="y" * (2 << 20))
                                                   for k in CH01}, 1),
            "trees/odd": _finished("trees/odd", {k: {**_exercise("done", 4, 4), "passed": "all"} for k in CH01})}
    book = gradebook.build(COURSE, list(CH01), runs)
    message = book["trees"]["trees/long"]["ch01.softmax"]["message"]
    assert len(message) < gradebook.MESSAGE_CHARS + 100 and message.endswith("characters cut]")
    assert _status(book, "trees/odd") == dict.fromkeys(CH01, "crashed")
    assert "not as the plugin writes it" in book["trees"]["trees/odd"]["ch01.norms"]["message"]


def test_whatever_a_trees_record_holds_ends_as_its_own_crashed_row():
    """A record nested 200,000 deep (json.loads raises RecursionError), counts out of range or
    infinite: that tree's crashed row, saying why; its classmates' rows as they are."""
    nested = b"[" * 200_000 + b"]" * 200_000
    record, why = runner.read_record(nested, "", "t", 0)
    assert record is None and "unreadable end-of-run record: nested deeper than the 8 levels read" in why
    runs = {"trees/inf": _finished("trees/inf", {k: {**_exercise("done", 4, 4), "passed": 1e400} for k in CH01}),
            "trees/nan": _finished("trees/nan", {k: {**_exercise("done", 4, 4), "seconds": float("nan")} for k in CH01}),
            "trees/more": _finished("trees/more", {k: _exercise("done", 5, 4) for k in CH01}),
            "trees/deep": TreeRun("trees/deep", "crashed", 1.0, 0, message=why),
            "trees/done": _class_runs()["trees/done"]}
    book = gradebook.build(COURSE, list(CH01), runs)
    for tree in ("trees/inf", "trees/nan", "trees/more", "trees/deep"):
        assert _status(book, tree) == dict.fromkeys(CH01, "crashed"), tree
    assert "OverflowError" in book["trees"]["trees/inf"]["ch01.softmax"]["message"]
    assert _status(book, "trees/done") == dict.fromkeys(CH01, "done")


def test_a_tree_whose_grading_fails_unforeseen_is_its_own_crashed_row(monkeypatch):
    """Whatever raises while one tree is graded (the sandbox, reading back, judging) ends as that
    tree's row, saying why: the class's other trees are graded and the gradebook written."""
    from pytest_tpucourse.classroom import trees as class_trees

    def grade_tree(grading, name, tree, folder, stop):
        if name == "trees/bad":
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
        return _class_runs()["trees/done"]

    monkeypatch.setattr(class_trees, "grade_tree", grade_tree)
    runs = class_trees.grade_trees(None, ["trees/bad", "trees/done"], jobs=2, progress=ProgressLine(2, quiet=True))
    assert runs["trees/bad"].outcome == "crashed"
    assert runs["trees/bad"].message == ("grading this tree failed: RecursionError: maximum recursion depth exceeded "
                                         "while decoding a JSON array")
    assert runs["trees/done"].outcome == "finished"


def _shard_book(runs, k, n, course=COURSE):
    """Shard K of N's gradebook of the class `runs`, as `tpucourse grade --shard K/N` builds it."""
    return gradebook.build(course, list(CH01), {t: runs[t] for t in shards.shard(runs, k, n)},
                           of_class=shards.class_facts(runs), shard=shards.held(k, n))


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_the_shards_merge_to_exactly_the_unsharded_gradebook(n):
    runs = _class_runs()
    whole = gradebook.dumps(gradebook.build(COURSE, list(CH01), runs))
    books = [_shard_book(runs, k, n) for k in range(n, 0, -1)]
    books = [json.loads(gradebook.dumps(gradebook.sign(book, KEY))) for book in books]  # as read from their files
    assert gradebook.dumps(gradebook.merge(books, KEY)) == whole


def test_merge_refuses_other_courses_grading_and_trees_graded_twice():
    runs = _class_runs()
    one = _shard_book(runs, 1, 2)
    other = _shard_book(runs, 2, 2, {**COURSE, "commit": "def"})
    with pytest.raises(gradebook.GradebookError, match="different courses"):
        gradebook.merge([one, other])
    with pytest.raises(gradebook.GradebookError, match="shard 1/2 is in both gradebook 1 and gradebook 2"):
        gradebook.merge([one, one])
    unsandboxed = _shard_book(runs, 2, 2, {**COURSE, "isolation": "none"})
    with pytest.raises(gradebook.GradebookError, match="different courses, chapters or grading"):
        gradebook.merge([one, unsandboxed])


def test_merge_takes_one_gradings_shards_every_one_or_a_partial_merge_by_name():
    """A shard alone, a whole gradebook with a shard, shards of another class or split, a shard
    that holds another's trees: refused, saying which shards of which grading are there."""
    runs = _class_runs()
    quarters = [_shard_book(runs, k, 4) for k in (1, 2, 3, 4)]
    assert gradebook.merge(quarters) == gradebook.build(COURSE, list(CH01), runs)
    with pytest.raises(gradebook.GradebookError, match=r"shard 2 of 4 given, of one grading: 1/4, 3/4, 4/4 missing"):
        gradebook.merge([quarters[1]])
    partial = gradebook.merge(quarters[:2], without=((3, 4), (4, 4)))
    assert partial["shard"] == {"parts": [1, 2], "of": 4} and len(partial["trees"]) < len(runs)
    assert gradebook.merge([partial, *quarters[2:]]) == gradebook.build(COURSE, list(CH01), runs)
    with pytest.raises(gradebook.GradebookError, match="name only shards of 4 that are not given"):
        gradebook.merge(quarters[:2], without=((2, 4), (3, 4), (4, 4)))
    whole = gradebook.build(COURSE, list(CH01), runs)
    with pytest.raises(gradebook.GradebookError, match="whole class's gradebook: it merges with no other"):
        gradebook.merge([whole, quarters[0]])
    others = {**runs, "trees/zed": runs["trees/done"]}  # another grading: a class of one more tree
    with pytest.raises(gradebook.GradebookError, match="gradebooks of two gradings"):
        gradebook.merge([quarters[0], _shard_book(others, 2, 4), *quarters[2:]])
    with pytest.raises(gradebook.GradebookError, match="shards of different splits"):
        gradebook.merge([quarters[0], _shard_book(runs, 2, 2)])
    swapped = [{**quarters[0], "trees": quarters[1]["trees"], "runs": quarters[1]["runs"]},
               {**quarters[1], "trees": quarters[0]["trees"], "runs": quarters[0]["runs"]}, *quarters[2:]]
    with pytest.raises(gradebook.GradebookError, match="holds trees that are not those of shard 1 of 4"):
        gradebook.merge(swapped)


def test_merge_takes_only_gradebooks_that_verify_with_the_key():
    runs = _class_runs()
    halves = [gradebook.sign(_shard_book(runs, k, 2), KEY) for k in (1, 2)]
    halves = [json.loads(gradebook.dumps(book)) for book in halves]  # as read back from their files
    assert gradebook.merge(halves, KEY) == gradebook.build(COURSE, list(CH01), runs)
    forged = json.loads(json.dumps(halves[1]))
    tree = next(t for t in forged["trees"] if forged["trees"][t]["ch01.softmax"]["status"] != "done")
    forged["trees"][tree]["ch01.softmax"]["status"] = "done"  # a grade changed after grading
    with pytest.raises(gradebook.GradebookError, match="shard-2.json: refused: its digest does not verify"):
        gradebook.merge([halves[0], forged], KEY, names=["shard-1.json", "shard-2.json"])
    with pytest.raises(gradebook.GradebookError, match="does not verify"):
        gradebook.merge(halves, b"another key")
    unsigned = {k: v for k, v in halves[1].items() if k != "digest"}
    with pytest.raises(gradebook.GradebookError, match="no digest"):
        gradebook.merge([halves[0], unsigned], KEY)


def test_the_merge_command_needs_the_key_and_refuses_a_forged_shard(tmp_path, capsys):
    runs = _class_runs()
    key = tmp_path / "key"
    key.write_bytes(KEY)
    paths = [tmp_path / "shard-1.json", tmp_path / "shard-2.json"]
    for k, path in enumerate(paths, 1):
        gradebook.write(gradebook.sign(_shard_book(runs, k, 2), KEY), path)
    merged = tmp_path / "all.json"
    assert main.main(["grade", "--merge", *map(str, paths), "--key", str(key), "--out", str(merged)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {merged}: 9 trees of a class of 9, the whole class, from 2 "
                                              f"gradebooks of one grading (course abc, ch01), each verified")
    assert signing.problem(gradebook.read(merged), KEY) == ""  # the merged gradebook is signed in turn
    assert main.main(["grade", "--merge", str(paths[1]), "--key", str(key), "-q", "--out", str(tmp_path / "z.json")]) == 2
    assert "shard 2 of 2 given, of one grading: 1/2 missing" in capsys.readouterr().err
    assert main.main(["grade", "--merge", str(paths[1]), "--without-shard", "1/2", "--key", str(key),
                      "--out", str(tmp_path / "half.json")]) == 0
    assert "shard 2 of 2, without 1/2 (a partial merge, as asked)" in capsys.readouterr().out
    assert main.main(["grade", "--merge", *map(str, paths), "-q", "--out", str(tmp_path / "x.json")]) == 2
    assert "give --key FILE" in capsys.readouterr().err
    paths[1].write_text(paths[1].read_text().replace('"status": "todo"', '"status": "done"'))
    assert main.main(["grade", "--merge", *map(str, paths), "--key", str(key), "-q",
                      "--out", str(tmp_path / "y.json")]) == 2
    assert "shard-2.json: refused: its digest does not verify" in capsys.readouterr().err
    assert not (tmp_path / "y.json").exists()


def test_the_gradebook_as_csv_and_the_summary_table(tmp_path):
    book = gradebook.build(COURSE, list(CH01), _class_runs())
    gradebook.write(book, tmp_path / "book.csv")
    rows = (tmp_path / "book.csv").read_text().splitlines()
    assert rows[0] == "tree,exercise,status,passed,total,seconds,message"
    assert "trees/skips,ch01.norms,failed,0,4,1.5,4 of 4 tests skipped: not today" in rows
    assert len(rows) == 1 + len(_class_runs()) * len(CH01)
    with pytest.raises(gradebook.GradebookError, match="JSON"):
        gradebook.read(tmp_path / "book.csv")
    lines = gradebook.summary_lines(book, {k: "ch01" for k in CH01})
    assert lines[0].split() == ["tree", "exercises", "chapters", "time"]
    assert any(line.split() == ["trees/done", "3/3", "1/1", "3.0s"] for line in lines)
    assert any(line.split() == ["trees/hang", "0/3", "0/1", "9.0s", "timeout"] for line in lines)
    assert any(line.split() == ["trees/todo", "0/3", "0/1", "3.0s", "3", "todo"] for line in lines)
    assert any(line.split() == ["trees/linked", "0/3", "0/1", "0.0s", "refused"] for line in lines)


def test_a_trees_name_and_messages_are_escaped_on_the_terminal_and_in_csv(tmp_path):
    name = "trees/\x1b[2J\x1b]0;owned\x07\u202eevil"
    message = "=HYPERLINK(\"http://example.invalid\")\x1b[2J"
    runs = {name: _finished(name, {k: _exercise("failed", 0, 4, message=message) for k in CH01}, 1)}
    book = gradebook.build(COURSE, list(CH01), runs)
    table = "\n".join(gradebook.summary_lines(book, {k: "ch01" for k in CH01}))
    assert not any(c in table for c in "\x1b\x07\u202e")
    assert "trees/\\x1b[2J\\x1b]0;owned\\x07\\u202eevil" in table
    gradebook.write(book, tmp_path / "book.csv")
    text = (tmp_path / "book.csv").read_text()
    assert not any(c in text for c in "\x1b\x07\u202e")
    assert ",\"'=HYPERLINK(" in text  # a message that would be a formula starts with '
    assert list(json.loads(gradebook.dumps(book))["trees"]) == [name]  # the JSON keeps the name as it is


def test_tree_names_that_print_alike_are_told_apart_in_the_table_and_the_csv(tmp_path):
    """`alice` and `аlice` (a Cyrillic а) are two trees; the table and the CSV show the second with
    its code points, and an ASCII name cannot imitate that form."""
    names = ["trees/alice", "trees/\u0430lice", "trees/alice [\\u0430lice]"]
    runs = {name: _finished(name, {k: _exercise("done", 1, 1) for k in CH01}, 1) for name in names}
    book = gradebook.build(COURSE, list(CH01), runs)
    table = gradebook.summary_lines(book, {k: "ch01" for k in CH01})[1:]
    shown = [line.split("  ")[0].strip() for line in table]
    assert "trees/\u0430lice [trees/\\u0430lice]" in shown and "trees/alice" in shown
    assert len(set(shown)) == 3
    gradebook.write(book, tmp_path / "book.csv")
    cells = {row.split(",")[0] for row in (tmp_path / "book.csv").read_text().splitlines()[1:]}
    assert "trees/\u0430lice [trees/\\u0430lice]" in cells and "trees/alice" in cells and len(cells) == 3


def test_escaping_for_the_terminal_and_for_csv():
    assert for_terminal("plain text, é and 漢字") == "plain text, é and 漢字"
    assert for_terminal("a\x1b[31mb\tc\nd\u202ee\x9b") == "a\\x1b[31mb\\x09c\\x0ad\\u202ee\\x9b"
    assert (for_csv("=1+1"), for_csv("@SUM(A1)"), for_csv("-2"), for_csv("a=b")) == ("'=1+1", "'@SUM(A1)", "'-2", "a=b")


# ------------------------------------------------------------------ what a tree printed, bounded


def test_a_log_keeps_its_first_and_last_lines_and_cuts_long_ones():
    log = BoundedLog(head=2, tail=3, line_chars=10)
    for chunk in (b"one\ntwo\nthr", b"ee\n" + b"x\n" * 1000 + b"y" * 100_000, b"\nlast"):
        log.feed(chunk)
    log.close()
    kept = log.kept()
    assert kept.first == ("one", "two") and kept.last == ("x", "yyyyyyyyyy [... cut]", "last")
    assert kept.left_out == 1 + 999
    assert kept.lines() == ["one", "two", "[... 1000 lines left out ...]", "x", "yyyyyyyyyy [... cut]", "last"]


# ------------------------------------------------------------------ JUnit, written by the grader


def test_junit_files_say_what_the_gradebook_says(tmp_path):
    book = gradebook.build(COURSE, list(CH01), _class_runs())
    junit.write_all(book, tmp_path / "junit")
    done = (tmp_path / "junit" / "trees_done.xml").read_text()
    assert 'tests="3" failures="0" errors="0"' in done and "<failure" not in done
    todo = (tmp_path / "junit" / "trees_todo.xml").read_text()
    assert 'failures="3"' in todo and 'type="todo" message="todo: TODO: write it"' in todo
    crash = (tmp_path / "junit" / "trees_crash.xml").read_text()
    assert 'errors="3"' in crash and "boom" in crash
    for path in (tmp_path / "junit").iterdir():
        ElementTree.parse(path)  # every one well formed


def test_every_tree_has_a_junit_file_of_its_own_whatever_its_name():
    """A file name each, never shared, whatever the other trees (or another shard's) are called."""
    names = ["subs/bob", "subs/bob!", "subs/bob_", "subs_bob", "subs/b\x1b[2Job", "subs/.hidden", "subs/" + "é" * 300,
             "subs/" + "é" * 300 + "x", "subs/bob%21"]
    files = junit.file_names(names)
    assert len(set(files.values())) == len(names)
    assert files["subs/bob"] == "subs_bob.xml" and files["subs/bob!"] == "subs_bob%21.xml"
    assert all(len(name.encode()) <= 255 and "/" not in name and not name.startswith(".") for name in files.values())
    assert junit.file_name("subs/bob!") == files["subs/bob!"]  # the same name in any shard's folder


# ------------------------------------------------------------------ the similarity report


def _tree_with(root: Path, name: str, softmax: str) -> str:
    folder = root / name / "ch01"
    folder.mkdir(parents=True)
    for module in ("softmax", "norms", "attention"):
        source = softmax if module == "softmax" else (REPO / "exercises" / "ch01" / f"{module}.py").read_text()
        (folder / f"{module}.py").write_text(source)
    return str(root / name)


OWN_SOFTMAX = '''
import jax
import jax.numpy as jnp


def softmax(x, *, axis=-1):
    values = x.astype(jnp.float32)
    peak = jnp.max(values, axis=axis, keepdims=True)
    peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
    powers = jnp.exp(values - jax.lax.stop_gradient(peak))
    norm = powers.sum(axis=axis, keepdims=True)
    norm = jnp.where(norm > 0, norm, 1.0)
    return (powers / norm).astype(x.dtype)
'''


def test_the_similarity_report_finds_copies_renamed_and_reformatted_and_judges_nothing(tmp_path):
    solution = (REPO / "solutions" / "ch01" / "softmax.py").read_text()
    renamed = (solution.replace("xf", "logits").replace("total", "denominator").replace("    ", "  ")
               .replace("# ", "## "))
    trees = [_tree_with(tmp_path, "ann", solution), _tree_with(tmp_path, "ben", renamed),
             _tree_with(tmp_path, "cat", OWN_SOFTMAX), _tree_with(tmp_path, "dan", "def softmax(x, *, axis=-1):\n"
                                                                                    "    return x\n")]
    (tmp_path / "eve").mkdir()
    (tmp_path / "eve" / "ch01").symlink_to(tmp_path / "ann" / "ch01")
    trees.append(str(tmp_path / "eve"))
    data = similarity.report(load_course(REPO), ["ch01"], trees)
    assert "never a verdict" in data["note"]
    pairs = {tuple(Path(f).parts[-3] for f in p["files"]): p["how"] for p in data["pairs"]}
    assert pairs == {("ann", "ben"): "identical code"}  # not cat's own, not dan's two lines, not eve's link
    alike = {Path(p["file"]).parts[-3]: p["how"] for p in data["like_solutions"]}
    assert alike == {"ann": "identical", "ben": "identical code"}
    assert data["files_compared"] == 3  # ann's, ben's and cat's softmax; stubs, short files and links are not
    assert data["not_read"] == [] and data["reach_the_course"] == []


def _padded(source: str) -> str:
    """`source` with a no-op statement after every statement of every block."""
    import ast

    class Pad(ast.NodeTransformer):
        def generic_visit(self, node):
            super().generic_visit(node)
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and all(isinstance(s, ast.stmt) for s in block):
                    setattr(node, name, [x for s in block for x in (s, ast.parse("_pad = None").body[0])])
            return node

    return ast.unparse(Pad().visit(ast.parse(source))) + "\n"


def test_the_similarity_report_compares_the_code_a_graded_module_runs_and_sees_through_disguises(tmp_path):
    """The shipped solution verbatim in a helper (imported, or a .txt file exec'd) with the graded
    file one line, and a classmate's kernel renamed, moved into a helper, its independent lines
    reordered and a no-op after every line: each is listed, and the honest kernel is not like the
    solution."""
    solution = (REPO / "solutions" / "ch01" / "softmax.py").read_text()
    hid = _tree_with(tmp_path, "hid", "from ._softmax import softmax\n")
    (tmp_path / "hid" / "ch01" / "_softmax.py").write_text(solution)
    txt = _tree_with(tmp_path, "txt", "import pathlib\nexec(pathlib.Path(__file__).with_name('softmax.txt').read_text())\n")
    (tmp_path / "txt" / "ch01" / "softmax.txt").write_text(solution)
    cat = _tree_with(tmp_path, "cat", OWN_SOFTMAX)
    disguised = OWN_SOFTMAX.replace("import jax\nimport jax.numpy as jnp", "import jax.numpy as jnp\nimport jax")
    for old_name, new_name in (("values", "v"), ("peak", "top"), ("powers", "p"), ("norm", "z"), ("softmax", "sm")):
        disguised = disguised.replace(old_name, new_name)
    cop = _tree_with(tmp_path, "cop", "from ._kernel import sm as softmax\n")
    (tmp_path / "cop" / "ch01" / "_kernel.py").write_text(_padded(disguised))
    far = _tree_with(tmp_path, "far", "import sys\nsys.path.insert(0, __file__.rsplit('/', 2)[0] + '/lib')\n"
                                      "from kernel import sm as softmax\n")
    (tmp_path / "far" / "lib").mkdir()
    (tmp_path / "far" / "lib" / "kernel.py").write_text(_padded(disguised))
    data = similarity.report(load_course(REPO), ["ch01"], [hid, txt, cat, cop, far])
    alike = {Path(p["file"]).parts[-3] for p in data["like_solutions"]}
    assert alike == {"hid", "txt"}
    pairs = {tuple(Path(f).parts[-3] for f in p["files"]) for p in data["pairs"]}
    assert ("cat", "cop") in pairs and ("cat", "far") in pairs and ("hid", "txt") in pairs
    [copied] = [p for p in data["pairs"] if {Path(f).parts[-3] for f in p["files"]} == {"cat", "cop"}]
    assert copied["how"] == "similar" and copied["similarity"] == 1.0  # all of cat's; cop has one line more
    assert copied["with_helpers"] == {str(tmp_path / "cop" / "ch01" / "softmax.py"): [str(tmp_path / "cop" / "ch01" / "_kernel.py")]}
    held = {(Path(entry["file"]).name, entry["solution"], entry["how"]) for entry in data["hold_solutions"]}
    assert held == {("_softmax.py", "solutions/ch01/softmax.py", "byte for byte"),
                    ("softmax.txt", "solutions/ch01/softmax.py", "byte for byte")}


def test_a_shipped_solution_anywhere_in_a_tree_is_found_by_its_fingerprints(tmp_path):
    """Deep in a folder of its own, in a zip archive, renamed and padded: the grader knows the
    solutions' fingerprints and finds them in any file of a tree."""
    import zipfile

    solution = (REPO / "solutions" / "ch11" / "matmul.py").read_text()
    tree = _tree_with(tmp_path, "zed", OWN_SOFTMAX)
    (tmp_path / "zed" / "lib" / "deep").mkdir(parents=True)
    (tmp_path / "zed" / "lib" / "deep" / "tiles.py").write_text(_padded(solution.replace("acc_ref", "total_ref")))
    with zipfile.ZipFile(tmp_path / "zed" / "lib" / "k.zip", "w") as archive:
        archive.writestr("kernels/mm.py", solution)
    data = similarity.report(load_course(REPO), ["ch01"], [tree])
    held = {(Path(entry["file"]).name, entry["solution"], entry["how"].split(",")[0]) for entry in data["hold_solutions"]}
    assert held == {("tiles.py", "solutions/ch11/matmul.py", "its code"),
                    ("mm.py", "solutions/ch11/matmul.py", "byte for byte")}


def test_a_file_python_cannot_read_is_listed_as_not_read_and_the_report_is_made(tmp_path):
    """A graded file in an encoding Python does not have (rot13 is no text encoding) is no error of
    the report: listed as not read, saying why, beside its classmates' pairs."""
    solution = (REPO / "solutions" / "ch01" / "softmax.py").read_text()
    trees = [_tree_with(tmp_path, "ann", solution), _tree_with(tmp_path, "ben", solution),
             _tree_with(tmp_path, "rot", "# -*- coding: rot13 -*-\nqrs fbsgznk(k, *, nkvf=-1):\n    erghea k\n")]
    data = similarity.report(load_course(REPO), ["ch01"], trees)
    assert data["not_read"] == [{"file": str(tmp_path / "rot" / "ch01" / "softmax.py"),
                                 "why": "Python cannot read it as source (LookupError: 'rot13' is not a text "
                                        "encoding; use codecs.decode() to handle arbitrary codecs)"}]
    assert [p["how"] for p in data["pairs"]] == ["identical"]


ORACLE_SOFTMAX = '''
import sys as _sys
from pytest_tpucourse import references


def softmax(x, *, axis=-1):
    """An answer from the course's own oracle."""
    caller = _sys._getframe(1).f_locals
    return references.SAFE_SOFTMAX.bind(axis=axis).floor(x)
'''


def test_the_report_lists_files_that_reach_into_the_course_or_the_process_around_them(tmp_path):
    """The course's oracles named, frames and the garbage collector looked into, in any file of the
    tree, a helper beside the graded module too; what the chapter's shipped files import (chapter
    14's timeline, the course's simulator) and the solutions' own code are not listed."""
    trees = [_tree_with(tmp_path, "ann", (REPO / "solutions" / "ch01" / "softmax.py").read_text()),
             _tree_with(tmp_path, "orc", ORACLE_SOFTMAX)]
    helper = tmp_path / "orc" / "ch01" / "helper.py"
    helper.write_text("import gc as g\nimport importlib\nthe_course = importlib.import_module('pytest_' 'tpucourse')\n"
                      "everything = g.get_objects()\n")
    (tmp_path / "ann" / "ch14").mkdir()
    (tmp_path / "ann" / "ch14" / "timeline.py").write_bytes((REPO / "solutions" / "ch14" / "timeline.py").read_bytes())
    data = similarity.report(load_course(REPO), ["ch01"], trees)
    assert data["reach_the_course"] == [
        {"file": str(helper), "how": ["names the course's package in a string (line 3)",
                                      "looks into the garbage collector: get_objects (line 4)"]},
        {"file": str(tmp_path / "orc" / "ch01" / "softmax.py"),
         "how": ["names pytest_tpucourse.references (line 3), which the chapter's stubs and solutions do not",
                 "looks into the call stack: _getframe, f_locals (line 8)"]}]


def test_the_reach_report_reads_files_a_tree_execs_or_imports_that_are_not_py(tmp_path):
    """The course's oracle reached from a notes.txt a module execs, or from a lib.zip it imports
    from, is listed as a .py file's would be; the course's own README.md copied in is not read."""
    import zipfile

    tree = _tree_with(tmp_path, "orc", "exec(open(__file__[:-10] + 'notes.txt').read())\n")
    (tmp_path / "orc" / "ch01" / "notes.txt").write_text(ORACLE_SOFTMAX)
    with zipfile.ZipFile(tmp_path / "orc" / "ch01" / "lib.zip", "w") as archive:
        archive.writestr("oracle.py", ORACLE_SOFTMAX)
    readme = REPO / "exercises" / "ch01" / "README.md"
    (tmp_path / "orc" / "ch01" / "README.md").write_bytes(readme.read_bytes())
    data = similarity.report(load_course(REPO), ["ch01"], [tree])
    files = [entry["file"] for entry in data["reach_the_course"]]
    assert files == [str(tmp_path / "orc" / "ch01" / "lib.zip" / "oracle.py"), str(tmp_path / "orc" / "ch01" / "notes.txt")]


def test_the_reports_are_bounded_and_say_what_they_skipped(tmp_path):
    """Files per tree, bytes per file and seconds for the class are bounded; each file not read for
    them is listed with why, and the report is made all the same."""
    from pytest_tpucourse.classroom.report_budget import Budget

    solution = (REPO / "solutions" / "ch01" / "softmax.py").read_text()
    tree = _tree_with(tmp_path, "big", solution)
    (tmp_path / "big" / "ch01" / "huge.py").write_text("x = 1\n" * 100_000)
    for n in range(5):
        (tmp_path / "big" / "ch01" / f"h{n}.py").write_text("import sys\nsys._getframe()\n")
    data = similarity.report(load_course(REPO), ["ch01"], [tree], Budget(files_per_tree=4, file_bytes=64 * 1024))
    why = {(Path(entry["file"]).name, entry["why"]) for entry in data["skipped"]}
    assert ("huge.py", "600000 bytes, over the 65536 a file is read at most") in why
    assert any(w == "over the 4 files a tree is read at most" for _, w in why)
    assert data["skipped_count"] == len(data["skipped"])
    assert len(data["reach_the_course"]) <= 4 and data["limits"]["files_per_tree"] == 4
    late = similarity.report(load_course(REPO), ["ch01"], [tree], Budget(seconds=0.0))
    assert late["files_compared"] == 0 and late["skipped"]
    assert all(entry["why"] == "the reports' 0 s for the class ran out" for entry in late["skipped"])


def test_json_from_a_tree_is_read_within_bounds():
    from pytest_tpucourse.core import untrusted_json

    deep = b"[" * 200_000 + b"]" * 200_000
    for data, why in ((deep, "nested deeper than the 8 levels"), (b"[" * 9 + b"]" * 9, "nested deeper"),
                      (b"\xff", "not JSON"), (b"{}" + b" " * 100, "more than the 50")):
        with pytest.raises(untrusted_json.JsonError, match=why):
            untrusted_json.loads(data, depth=8, size=50 if why.startswith("more") else None)
    assert untrusted_json.loads(b'{"a": [[1]]}', depth=3) == {"a": [[1]]}
    header = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(plain_data.PlainDataError, match="nested deeper"):
        plain_data.decode(plain_data.MAGIC + len(header).to_bytes(8, "big") + header)


# ------------------------------------------------------------------ the progress line


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_line_counts_trees_and_estimates_the_rest():
    clock, out = FakeClock(), io.StringIO()
    progress = ProgressLine(4, stream=out, clock=clock)
    progress.started("trees/a")
    progress.started("trees/\x1b[2Jb")
    assert progress.text() == "grade: 0/4 trees done, grading trees/a, trees/\\x1b[2Jb; 0s elapsed"
    clock.now = 30.0
    progress.finished("trees/a", "finished")
    assert progress.text() == "grade: 1/4 trees done, grading trees/\\x1b[2Jb; 30s elapsed, about 1m30s left"
    assert out.getvalue() == ("grade: 1/4 trees done, grading trees/\\x1b[2Jb; 30s elapsed, about 1m30s left "
                              "(trees/a: finished)\n")
    quiet = io.StringIO()
    silent = ProgressLine(1, stream=quiet, quiet=True, clock=clock)
    silent.started("x")
    silent.finished("x", "crashed")
    silent.close()
    assert quiet.getvalue() == ""


# ------------------------------------------------------------------ a tree's sandbox


def _bubblewrap() -> sandbox.Isolation:
    try:
        return sandbox.find_isolation()
    except sandbox.SandboxUnavailable as error:
        pytest.skip(f"no sandbox here: {error}")


ISOLATIONS = [pytest.param("none", id="no-sandbox"), pytest.param("bubblewrap", id="bubblewrap")]


def _isolation(kind: str) -> sandbox.Isolation:
    return sandbox.Isolation.none() if kind == "none" else _bubblewrap()


def _sandbox(tmp_path: Path, isolation: sandbox.Isolation, *, hidden=()) -> sandbox.TreeSandbox:
    tree = tmp_path / "class" / "tree"
    (tree / "ch01").mkdir(parents=True)
    (tree / "ch01" / "softmax.py").write_text("def softmax(x, *, axis=-1):\n    return x\n")
    view = sandbox.CourseView.of(REPO, hidden=[tree, *hidden])
    return sandbox.TreeSandbox(tree, tmp_path / "grading" / "tree-0001", view, isolation)


def _script(box: sandbox.TreeSandbox, source: str) -> str:
    script = box.work / "child.py"
    script.write_text(textwrap.dedent(source))
    if box.uid is not None:
        os.chown(script, box.uid, box.uid)
    return str(script)


def _child(tmp_path, source, kind, *, limit=60.0, exit_grace=30.0, token="secret"):
    """`source` run as a tree's process is, with the token on its pipe: how the grader judges its end."""
    with _sandbox(tmp_path, _isolation(kind)) as box:
        ran = box.run([sys.executable, _script(box, source)], timeout=limit,
                      secrets_by_fd={TOKEN_FD_ENV: token.encode()}, hand_back=(runner.RECORD,),
                      ended_when=runner.RECORD, exit_grace=exit_grace)
        return runner.how_it_ended("tree", ran, token), ran


RECORD = textwrap.dedent("""
    import json, os
    token = os.read(int(os.environ["{env}"]), 256).decode()
    record = {{"format": {format}, "token": token, "exitstatus": 0, "exercises": {{}},
              "collection_errors": []}}
    open("results.json", "w").write(json.dumps(record))
""").format(format=FORMAT, env=TOKEN_FD_ENV)


@pytest.mark.runs
@pytest.mark.parametrize("kind", ISOLATIONS)
def test_a_process_that_ends_without_its_record_crashed(tmp_path, kind):
    run, _ = _child(tmp_path, "import os\nprint('importing the tree')\nos._exit(0)\n", kind)
    assert (run.outcome, run.returncode) == ("crashed", 0)
    assert "without the run's end-of-run record" in run.message and run.log == ("importing the tree",)


@pytest.mark.runs
@pytest.mark.parametrize("kind", ISOLATIONS)
def test_a_record_without_the_childs_token_does_not_count(tmp_path, kind):
    run, _ = _child(tmp_path, RECORD.replace("token = os.read(", 'token = "guessed" or os.read('), kind)
    assert run.outcome == "crashed" and "did not write" in run.message


@pytest.mark.runs
@pytest.mark.parametrize("kind", ISOLATIONS)
def test_a_record_with_its_token_counts_and_the_token_is_in_no_environment(tmp_path, kind):
    """Another process could read a child's /proc/PID/environ: the token is not there."""
    each_line = "import os, json\nfor item in sorted(os.environ.items()):\n    print(json.dumps(item))\n"
    run, ran = _child(tmp_path, each_line + RECORD, kind)
    assert run.outcome == "finished" and run.record["exitstatus"] == 0
    environment = dict(json.loads(line) for line in ran.stdout_log.lines())
    assert "secret" not in json.dumps(environment) and environment[TOKEN_FD_ENV].isdigit()


@pytest.mark.runs
@pytest.mark.parametrize("kind", ISOLATIONS)
def test_past_its_limit_every_process_is_killed(tmp_path, kind):
    start = time.monotonic()
    run, _ = _child(tmp_path, """
        import subprocess, sys, time, threading
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        threading.Thread(target=time.sleep, args=(600,)).start()
        time.sleep(600)
    """, kind, limit=3.0)
    assert run.outcome == "timeout" and "limit of 3 s" in run.message
    assert time.monotonic() - start < 60


@pytest.mark.runs
@pytest.mark.parametrize("kind", ISOLATIONS)
def test_a_run_that_ended_but_whose_process_does_not_is_a_timeout(tmp_path, kind):
    never_ends = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n"
    run, _ = _child(tmp_path, RECORD + never_ends, kind, exit_grace=1.0)
    assert run.outcome == "timeout" and "did not exit within 1 s" in run.message


PROBE = """
    import json, os, socket, subprocess, sys
    paths, tree, mark = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    seen = {name: os.path.exists(path) for name, path in paths.items()}
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=3)
        seen["network"] = True
    except OSError:
        seen["network"] = False
    seen["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    seen["uid"] = os.getuid()
    try:
        open(paths["stub"], "a").write("# changed")
        seen["course written"] = True
    except OSError:
        seen["course written"] = False
    open(os.path.join(tree, "ch01", "softmax.py"), "a").write("# changed by the tree")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", mark], start_new_session=True)
    print(json.dumps(seen))
"""


@pytest.mark.runs
def test_a_sandbox_sees_its_tree_and_the_course_and_nothing_else(tmp_path):
    """No classmate, no solutions/ nor tests/ nor .git, no grader's output, no network, no other
    process; its writes go to its own copy; a process it starts in a session of its own is gone
    when the run returns."""
    isolation = _bubblewrap()
    classmate = tmp_path / "class" / "classmate" / "ch01"
    classmate.mkdir(parents=True)
    (classmate / "softmax.py").write_text("classmate's work\n")
    out = tmp_path / "out" / "gradebook.json"
    out.parent.mkdir()
    out.write_text("{}")
    paths = {"classmate": str(classmate / "softmax.py"), "out": str(out), "tests": str(REPO / "tests"),
             "solutions": str(REPO / "solutions" / "ch01" / "softmax.py"), "git": str(REPO / ".git"),
             "stub": str(REPO / "exercises" / "ch01" / "softmax.py"), "python": sys.executable}
    mark = f"survivor-{os.getpid()}-{time.monotonic_ns()}"
    with _sandbox(tmp_path, isolation, hidden=[classmate.parent, out.parent]) as box:
        ran = box.run([sys.executable, _script(box, PROBE), json.dumps(paths), box.tree, mark], timeout=120)
        assert ran.exit_status == 0, ran.stderr
        assert not survivors(mark)  # gone before run() returned
        assert (box.folder / "tree" / "ch01" / "softmax.py").read_text().endswith("# changed by the tree")
    seen = json.loads(ran.stdout_log.first[0])
    assert seen["stub"] and seen["python"]
    assert not any(seen[k] for k in ("classmate", "out", "solutions", "tests", "git", "network", "course written"))
    assert len(seen["processes"]) <= 2  # bubblewrap's first process and the probe
    assert (seen["uid"] != 0) == (os.geteuid() == 0)  # as root, a throwaway user; else the grader's, mapped
    original = (tmp_path / "class" / "tree" / "ch01" / "softmax.py").read_text()
    assert original == "def softmax(x, *, axis=-1):\n    return x\n"
    assert (classmate / "softmax.py").read_text() == "classmate's work\n"


@pytest.mark.runs
def test_a_tree_reads_the_shared_compile_cache_and_writes_only_its_own_copy(tmp_path):
    shared = tmp_path / "course-cache"
    (shared / "kernel-programs").mkdir(parents=True)
    (shared / "kernel-programs" / "entry").write_text("compiled by the solutions")
    tree = tmp_path / "class" / "tree"
    (tree / "ch01").mkdir(parents=True)
    view = sandbox.CourseView.of(REPO, hidden=[tree])
    with sandbox.TreeSandbox(tree, tmp_path / "grading", view, _bubblewrap(), shared_cache=shared) as box:
        ran = box.run([sys.executable, _script(box, f"""
            import os
            entry = os.path.join({str(shared)!r}, "kernel-programs", "entry")
            print(open(entry).read())
            try:
                open(entry, "a").write("poisoned")  # the entry itself (a link to the shared one, not its own)
            except OSError:
                pass
            open(entry + ".mine", "w").write("poisoned")
            os.replace(entry + ".mine", entry)  # its own folder's name for it
            open(os.path.join({str(shared)!r}, "new-entry"), "w").write("the tree's")
        """)], timeout=60)
        assert ran.exit_status == 0, ran.stderr
        assert ran.stdout_log.first == ("compiled by the solutions",)
    assert (shared / "kernel-programs" / "entry").read_text() == "compiled by the solutions"
    assert sorted(p.name for p in shared.rglob("*")) == ["entry", "kernel-programs"]


@pytest.mark.runs
def test_what_a_sandbox_hands_back_is_a_regular_file_within_bounds(tmp_path):
    with _sandbox(tmp_path, _bubblewrap()) as box:
        ran = box.run([sys.executable, _script(box, f"""
            import os
            os.symlink("/etc/passwd", "results.json")
            open("big", "wb").truncate({sandbox.HAND_BACK_BYTES + 1})
            os.mkfifo("fifo")
            open("fine", "w").write("ok")
            print("x" * 100_000)
        """)], timeout=60, hand_back=("results.json", "big", "fifo", "fine", "absent"))
    assert ran.files == {"fine": b"ok"}
    assert set(ran.missing) == {"results.json", "big", "fifo", "absent"}
    assert len(ran.stdout_log.first[0]) < 1000


def test_a_sandbox_sees_python_and_of_the_course_what_a_graded_run_reads(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "tests"))  # as in the course's own test runs
    view = sandbox.CourseView.of(REPO, hidden=[REPO / "exercises" / "ch01", tmp_path])

    def seen(path: Path) -> bool:
        return any(path == s or s in path.parents for s in view.shown)

    assert all(seen(REPO / name) for name in ("course.toml", "exercises", "pytest_tpucourse"))
    assert seen(Path(sys.prefix).resolve()) and seen(Path(sys.base_prefix).resolve())
    assert not any(seen(REPO / name) for name in ("solutions", "tests", ".git", "docs", ".tpucourse"))
    assert view.covered() == [REPO / "exercises" / "ch01"]  # the other hidden path is not shown anyway


def test_a_key_inside_the_python_environment_is_covered_and_the_environment_still_shown(monkeypatch, tmp_path):
    """The key may live anywhere outside the trees: inside the environment the sandbox shows, it is
    covered where it is, and the environment stays shown (else nothing could even import Python's
    packages); a folder on sys.path inside a hidden tree is not shown."""
    env, tree = tmp_path / "env", tmp_path / "trees" / "alice"
    (env / "lib").mkdir(parents=True)
    (env / "grading.key").write_bytes(b"secret")
    (tree / "lib").mkdir(parents=True)
    monkeypatch.setattr(sandbox, "_python_paths", lambda: ([env], [tree / "lib"]))
    view = sandbox.CourseView.of(REPO, hidden=[env / "grading.key", tree])
    assert env in view.shown and (tree / "lib") not in view.shown
    assert view.covered() == [env / "grading.key"]


class _TrustedProbe:
    """A trusted check whose worker reports what it sees from where grade_tree runs it, and whose
    verdicts are computed here, in the grader's process, from what the worker handed back."""

    def __init__(self, classmate: Path):
        self.classmate, self.runners = classmate, []

    def check_tree(self, runner_, *, timeout):
        self.runners.append(runner_)
        probe = ("import json, os, sys; seen = {'classmate': os.path.exists(sys.argv[1]), 'pids': len([p for p in "
                 "os.listdir('/proc') if p.isdigit()]), 'cases': open('cases.bin').read(), 'tree': sys.argv[2], "
                 "'own copy': open(os.path.join(sys.argv[2], 'ch01', 'softmax.py')).read()}; "
                 "open('answer.bin', 'w').write(json.dumps(seen))")
        ran = runner_.run([sys.executable, "-c", probe, str(self.classmate), runner_.tree], timeout=timeout,
                          inputs={"cases.bin": b"drawn in the grader"}, hand_back=["answer.bin"])
        seen = json.loads(ran.files["answer.bin"])
        from pytest_tpucourse.classroom.trusted_check import AGREES, DISAGREES, Verdict

        agrees = seen["cases"] == "drawn in the grader" and not seen["classmate"] and seen["pids"] <= 2
        return {"ch01.softmax": Verdict(AGREES if agrees else DISAGREES, json.dumps(seen), 1)}


class _RecordOnly(runner.GradingRun):
    """A grading whose "pytest run" only writes its end-of-run record (its token read off its pipe)
    after changing its own copy of the tree: grade_tree's path without pytest's cost."""

    def command(self, tree, work):
        edit = f"open({str(Path(tree) / 'ch01' / 'softmax.py')!r}, 'a').write('# the run was here')\n"
        return [sys.executable, "-c", edit + RECORD]


class _Crashing(runner.GradingRun):
    def command(self, tree, work):
        return [sys.executable, "-c", "import os; os._exit(0)"]


@pytest.mark.runs
def test_the_trusted_check_runs_its_worker_in_the_trees_sandbox_after_its_run(tmp_path):
    """grade_tree gives the trusted check the tree's sandbox: its worker sees its own copy of the
    tree as the pytest run left it, no classmate and no other process, and is handed what the
    grader drew; its verdicts are kept on the run. A run that did not finish is not checked."""
    classmate = tmp_path / "class" / "classmate" / "ch01" / "softmax.py"
    classmate.parent.mkdir(parents=True)
    classmate.write_text("classmate's work\n")
    tree = tmp_path / "class" / "tree"
    (tree / "ch01").mkdir(parents=True)
    (tree / "ch01" / "softmax.py").write_text("def softmax(x, *, axis=-1):\n    return x\n")
    probe = _TrustedProbe(classmate)
    view = sandbox.CourseView.of(REPO, hidden=[tree, classmate.parent.parent])
    grading = _RecordOnly(course_root=REPO, chapters=("ch01",), timeout=60, jax_cache="none",
                          isolation=_bubblewrap(), view=view, trusted=probe)
    run = runner.grade_tree(grading, "tree", tree, tmp_path / "grading" / "tree-0001")
    assert run.finished, (run.message, run.log)
    assert [type(r) for r in probe.runners] == [sandbox.TreeSandbox]
    verdict = run.trusted["ch01.softmax"]
    assert verdict["verdict"] == "agrees", verdict["reason"]
    seen = json.loads(verdict["reason"])
    assert seen["tree"] == str(tree.resolve()) and seen["own copy"].endswith("# the run was here")
    assert (tree / "ch01" / "softmax.py").read_text() == "def softmax(x, *, axis=-1):\n    return x\n"
    book = gradebook.build(COURSE, list(CH01), {"tree": run})
    assert book["trees"]["tree"]["ch01.softmax"]["trusted"]["verdict"] == "agrees"
    assert book["trees"]["tree"]["ch01.norms"]["trusted"]["verdict"] == "not checkable"
    crashing = _Crashing(course_root=REPO, chapters=("ch01",), timeout=60, jax_cache="none",
                         isolation=_bubblewrap(), view=view, trusted=probe)
    crashed = runner.grade_tree(crashing, "tree", tree, tmp_path / "grading" / "tree-0002")
    assert crashed.outcome == "crashed" and crashed.trusted is None and len(probe.runners) == 1


@pytest.mark.runs
def test_a_runs_inputs_and_answers_are_its_own_not_what_an_earlier_run_left(tmp_path):
    victim = tmp_path / "grader's file"
    victim.write_text("the grader's")
    with _sandbox(tmp_path, _bubblewrap()) as box:
        first = box.run([sys.executable, _script(box, f"""
            import os
            os.symlink({str(victim)!r}, "cases.bin")  # where the grader will write the next run's inputs
            open("answers.bin", "w").write("stale")
        """)], timeout=60)
        assert first.exit_status == 0, first.stderr
        second = box.run([sys.executable, "-c", "print(open('cases.bin').read())"], timeout=60,
                          inputs={"cases.bin": b"the cases"}, hand_back=("answers.bin",))
    assert victim.read_text() == "the grader's"
    assert second.stdout_log.first == ("the cases",) and second.files == {}


def test_a_tree_with_a_link_out_of_it_is_refused_and_one_inside_it_is_kept(tmp_path):
    outside = tmp_path / "classmate"
    outside.mkdir()
    (outside / "softmax.py").write_text("x = 1\n")
    tree = tmp_path / "tree"
    (tree / "ch01" / "__pycache__").mkdir(parents=True)
    (tree / "ch01" / "helpers.py").write_text("y = 2\n")
    (tree / "ch01" / "norms.py").symlink_to("helpers.py")
    (tree / "ch01" / "__pycache__" / "norms.cpython-311.pyc").write_bytes(b"not what the source says")
    assert sandbox.copy_tree(tree, tmp_path / "copy") == ""
    assert os.readlink(tmp_path / "copy" / "ch01" / "norms.py") == "helpers.py"
    assert not (tmp_path / "copy" / "ch01" / "__pycache__").exists()  # bytecode is not the source
    (tree / "ch01" / "softmax.py").symlink_to(outside / "softmax.py")
    assert sandbox.copy_tree(tree, tmp_path / "copy2").startswith("ch01/softmax.py is a link to")


def test_without_bubblewrap_grading_is_refused_unless_asked_for(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="--no-sandbox"):
        sandbox.find_isolation()
    assert not sandbox.find_isolation(unsandboxed=True).isolated
    (tmp_path / "t").mkdir()
    monkeypatch.chdir(REPO)
    assert main.main(["grade", str(tmp_path / "t"), "--chapters", "ch01", "-q", "--out", str(tmp_path / "b.json")]) == 2
    assert "bubblewrap (bwrap) is not installed" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


@pytest.mark.runs
def test_grading_from_a_copy_of_the_course_imports_the_package_where_it_is_installed(tmp_path):
    """`tpucourse grade` run in another folder than the one the package imports from (an editable
    install of this checkout, whose finder no sys.path entry names; a clone graded from): every
    sandbox shows the package's own folder, so each tree's run and its trusted worker import it."""
    _bubblewrap()
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("course.toml", "pyproject.toml", "conftest.py"):
        shutil.copyfile(REPO / name, clone / name)
    shutil.copytree(REPO / "exercises", clone / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (clone / "pytest_tpucourse").exists()
    tree = tmp_path / "class" / "stubs" / "ch01"
    tree.mkdir(parents=True)
    for module in ("softmax", "norms", "attention"):
        shutil.copyfile(REPO / "exercises" / "ch01" / f"{module}.py", tree / f"{module}.py")
    out = tmp_path / "out" / "book.json"
    command = [sys.executable, "-c", "import sys; from pytest_tpucourse.commands.main import main; sys.exit(main())",
               "grade", str(tree.parent), "--chapters", "ch01", "--jax-cache", "none", "-q", "--out", str(out)]
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    book = gradebook.read(out)
    run, entries = book["runs"][str(tree.parent)], book["trees"][str(tree.parent)]
    assert run["outcome"] == "finished", run
    assert {e["status"] for e in entries.values()} == {"todo"}
    assert all(e["trusted"]["verdict"] == "disagrees" and "TODO" in e["trusted"]["reason"] for e in entries.values())


def test_a_sandbox_shows_the_folder_the_package_imports_from_and_no_other_checkout_whole(monkeypatch, tmp_path):
    """Wherever the course is graded from, its sandboxes show the running package's folder; a course
    checkout on sys.path (an older editable install's entry) is not shown whole, solutions/ and all."""
    other = tmp_path / "other-checkout"
    (other / "solutions").mkdir(parents=True)
    (other / "course.toml").write_text("")
    monkeypatch.syspath_prepend(str(other))
    view = sandbox.CourseView.of(tmp_path / "clone")
    package = Path(sandbox.__file__).resolve().parents[1]
    assert any(package == s or s in package.parents for s in view.shown)
    assert not any(other == s or s in other.parents or other in s.parents for s in view.shown)
