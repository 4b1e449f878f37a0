"""`tpucourse grade`: one process per tree, the end-of-run record, the gradebook, shards, progress."""

import contextlib
import io
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_tpucourse.commands import main
from pytest_tpucourse.classroom import gradebook, runner, shards
from pytest_tpucourse.classroom.progress_line import ProgressLine
from pytest_tpucourse.classroom.record import FORMAT, TOKEN_FD_ENV
from pytest_tpucourse.classroom.runner import TreeRun

REPO = Path(__file__).resolve().parents[1]
CH01 = ("ch01.softmax", "ch01.norms", "ch01.attention")
COURSE = {"commit": "abc", "chapters": ["ch01"]}


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
        "trees/crash": TreeRun("trees/crash", "crashed", 2.0, 0, message="ended without its record",
                               last_lines=("boom",)),
        "trees/hang": TreeRun("trees/hang", "timeout", 9.0, None, message="ran past its limit"),
        "trees/half": _finished("trees/half", {"ch01.softmax": _exercise("done", 4, 4)}),
        "trees/void": _finished("trees/void", {k: {**_exercise("not counted", 4, 4), "not_counted": "a plugin"}
                                               for k in CH01}),
    }


def _status(book, tree):
    return {key: entry["status"] for key, entry in book["trees"][tree].items()}


def test_only_every_test_passed_is_done_and_a_crash_or_timeout_never_is():
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
    assert book["runs"]["trees/crash"] == {"outcome": "crashed", "exit_status": 0, "seconds": 2.0,
                                           "last_lines": ["boom"]}
    assert list(book["trees"]) == sorted(book["trees"])
    assert list(book["trees"]["trees/done"]) == list(CH01)  # course order


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_the_shards_merge_to_exactly_the_unsharded_gradebook(n):
    runs = _class_runs()
    whole = gradebook.dumps(gradebook.build(COURSE, list(CH01), runs))
    books = [gradebook.build(COURSE, list(CH01), {t: runs[t] for t in shards.shard(runs, k, n)})
             for k in range(n, 0, -1)]
    books = [json.loads(gradebook.dumps(book)) for book in books]  # as read back from their files
    assert gradebook.dumps(gradebook.merge(books)) == whole


def test_merge_refuses_other_courses_and_trees_graded_twice():
    runs = _class_runs()
    one = gradebook.build(COURSE, list(CH01), {"trees/done": runs["trees/done"]})
    other = gradebook.build({**COURSE, "commit": "def"}, list(CH01), {"trees/todo": runs["trees/todo"]})
    with pytest.raises(gradebook.GradebookError, match="different courses"):
        gradebook.merge([one, other])
    with pytest.raises(gradebook.GradebookError, match="trees/done"):
        gradebook.merge([one, one])


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
    progress.started("trees/b")
    assert progress.text() == "grade: 0/4 trees done, grading trees/a, trees/b; 0s elapsed"
    clock.now = 30.0
    progress.finished("trees/a", "finished")
    assert progress.text() == "grade: 1/4 trees done, grading trees/b; 30s elapsed, about 1m30s left"
    assert out.getvalue() == "grade: 1/4 trees done, grading trees/b; 30s elapsed, about 1m30s left (trees/a: finished)\n"
    quiet = io.StringIO()
    silent = ProgressLine(1, stream=quiet, quiet=True, clock=clock)
    silent.started("x")
    silent.finished("x", "crashed")
    silent.close()
    assert quiet.getvalue() == ""


# ------------------------------------------------------------------ one child process (plain Python)


def _child(tmp_path, source, *, limit=60.0, exit_grace=30.0, token="secret"):
    folder = tmp_path / "child"
    folder.mkdir()
    script = folder / "child.py"
    script.write_text(textwrap.dedent(source))
    env = runner.child_environment(folder)
    return runner.run_child("tree", [sys.executable, str(script)], folder=folder, env=env, token=token,
                            limit=limit, exit_grace=exit_grace)


RECORD = textwrap.dedent("""
    import json, os
    token = os.read(int(os.environ["{env}"]), 256).decode()
    record = {{"format": {format}, "token": token, "exitstatus": 0, "exercises": {{}},
              "collection_errors": []}}
    open("results.json", "w").write(json.dumps(record))
""").format(format=FORMAT, env=TOKEN_FD_ENV)


@pytest.mark.runs
def test_a_process_that_ends_without_its_record_crashed(tmp_path):
    run = _child(tmp_path, "import os\nprint('importing the tree')\nos._exit(0)\n")
    assert (run.outcome, run.returncode) == ("crashed", 0)
    assert "without the run's end-of-run record" in run.message and run.last_lines == ("importing the tree",)


@pytest.mark.runs
def test_a_record_without_the_childs_token_does_not_count(tmp_path):
    run = _child(tmp_path, RECORD.replace("token = os.read(", 'token = "guessed" or os.read('))
    assert run.outcome == "crashed" and "did not write" in run.message


@pytest.mark.runs
def test_the_token_is_in_no_environment(tmp_path):
    """Another tree's process could read a child's /proc/PID/environ: the token is not there."""
    run = _child(tmp_path, "import os, json\n"
                           "open('env.json', 'w').write(json.dumps(dict(os.environ)))\n" + RECORD)
    environment = json.loads((tmp_path / "child" / "env.json").read_text())
    assert run.outcome == "finished" and "secret" not in json.dumps(environment)
    assert environment[TOKEN_FD_ENV].isdigit()


@pytest.mark.runs
def test_a_record_with_its_token_and_exit_status_counts(tmp_path):
    run = _child(tmp_path, RECORD)
    assert run.outcome == "finished" and run.record["exitstatus"] == 0


@pytest.mark.runs
def test_past_its_limit_the_whole_process_group_is_killed(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    start = time.monotonic()
    run = _child(tmp_path, f"""
        import subprocess, sys, time, threading
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        threading.Thread(target=time.sleep, args=(600,)).start()
        time.sleep(600)
    """, limit=3.0)
    assert run.outcome == "timeout" and "limit of 3 s" in run.message
    assert time.monotonic() - start < 30
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status  # a zombie waits for its parent (init) to reap it


@pytest.mark.runs
def test_a_run_that_ended_but_whose_process_does_not_is_a_timeout(tmp_path):
    run = _child(tmp_path, RECORD + "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n",
                 exit_grace=1.0)
    assert run.outcome == "timeout" and "did not exit within 1 s" in run.message


# ------------------------------------------------------------------ the real thing: five trees of chapter 1


def _class_of_five(root: Path) -> list[str]:
    """solutions, stubs, os._exit(0) at import, a thread that never ends, and one that skips every case."""
    def tree(name, edit=None):
        folder = root / name / "ch01"
        folder.mkdir(parents=True)
        for module in ("softmax", "norms", "attention"):
            source = (REPO / ("exercises" if name == "stubs" else "solutions") / "ch01" / f"{module}.py").read_text()
            (folder / f"{module}.py").write_text(edit(module, source) if edit else source)
        return str(root / name)

    functions = {"softmax": ("softmax",), "norms": ("layer_norm", "rms_norm"), "attention": ("attention",)}
    skipping = lambda module, source: "import pytest\n" + "".join(  # noqa: E731
        f"\n\ndef {f}(*args, **kwargs):\n    pytest.skip('not today')\n" for f in functions[module])
    return [
        tree("solutions"), tree("stubs"),
        tree("exits", lambda m, s: "import os; os._exit(0)\n" + s if m == "softmax" else s),
        tree("thread", lambda m, s: ("import threading, time\nthreading.Thread(target=lambda: "
                                     "[time.sleep(0.5) for _ in iter(int, 1)]).start()\n" + s) if m == "softmax" else s),
        tree("skips", skipping),
    ]


def _grade(*argv) -> tuple[int, str]:
    """`tpucourse grade ...` run in the course checkout; its exit status and what it printed."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.chdir(REPO)
        status = main.main(["grade", *map(str, argv)])
    return status, out.getvalue()


# --key: every grading draws the trusted check's cases from the same secret (any file's bytes; this
# one's here), so the shards' gradebooks and the unsharded one name the same cases.
GRADE_CH01 = ("--chapters", "ch01", "--jobs", "2", "--timeout", "400", "--key", __file__)


@pytest.fixture(scope="module")
def class_of_five(tmp_path_factory):
    """The five trees graded in one go: (their folder, the trees, the gradebook's path, what it printed)."""
    root = tmp_path_factory.mktemp("classroom")
    trees = _class_of_five(root / "class")
    status, printed = _grade(*trees, *GRADE_CH01, "--junitxml", root / "junit", "--out", root / "gradebook.json")
    assert status == 0, printed
    return root, trees, root / "gradebook.json", printed


@pytest.mark.runs
def test_five_trees_of_chapter_one(class_of_five):
    root, trees, out, printed = class_of_five
    book = gradebook.read(out)
    name = {str(root / "class" / n): n for n in ("solutions", "stubs", "exits", "thread", "skips")}
    statuses = {name[tree]: set(_status(book, tree).values()) for tree in book["trees"]}
    assert statuses == {"solutions": {"done"}, "stubs": {"todo"}, "exits": {"crashed"}, "thread": {"timeout"},
                        "skips": {"failed"}}
    assert book["course"]["chapters"] == ["ch01"]
    solutions = book["trees"][str(root / "class" / "solutions")]
    assert [(e["passed"], e["total"]) for e in solutions.values()] == [(15, 15), (4, 4), (4, 4)]
    assert book["runs"][str(root / "class" / "exits")]["exit_status"] == 0
    junit = sorted(p.name for p in (root / "junit").iterdir())
    assert len(junit) == 5 and all(n.endswith(".xml") for n in junit)
    thread_junit = next((root / "junit").glob("*thread.xml")).read_text()
    assert 'error message="timeout: a thread never ends' in thread_junit  # as the gradebook says, not passed
    skips = book["trees"][str(root / "class" / "skips")]["ch01.softmax"]["message"]
    assert "called pytest.skip()" in skips, skips  # a skip from graded code is its failure
    assert "3/3" in printed and f"wrote {out}" in printed


def _without_times(book: dict) -> dict:
    return {**book, "trees": {t: {k: {**e, "seconds": None} for k, e in exercises.items()}
                              for t, exercises in book["trees"].items()},
            "runs": {t: {**r, "seconds": None, "last_lines": None} for t, r in book["runs"].items()}}


@pytest.mark.runs
def test_the_two_shards_merge_to_the_unsharded_gradebook(class_of_five, tmp_path):
    root, trees, whole, _ = class_of_five
    halves = [tmp_path / "shard-1.json", tmp_path / "shard-2.json"]
    for k, half in enumerate(halves, 1):
        assert _grade(*trees, *GRADE_CH01, "--shard", f"{k}/2", "-q", "--out", half)[0] == 0
    assert _grade("--merge", *halves, "--out", tmp_path / "all.json", "-q")[0] == 0
    merged, unsharded = gradebook.read(tmp_path / "all.json"), gradebook.read(whole)
    assert list(merged["trees"]) == list(unsharded["trees"])
    assert _without_times(merged) == _without_times(unsharded)  # the same runs again, times aside
