"""The trusted check: plain data across the boundary, the grader's judgement, the worker in its own
process, and trees that lie in theirs (docs/grading.md, "The trusted check")."""

import contextlib
import hashlib
import io
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_tpucourse.classroom import gradebook, trusted_check
from pytest_tpucourse.classroom.record import FORMAT
from pytest_tpucourse.classroom.runner import TreeRun
from pytest_tpucourse.classroom.tree_runner import Ran, Unisolated, bounded
from pytest_tpucourse.classroom.trusted_check import AGREES, DISAGREES, NOT_CHECKABLE, Expectation, TrustedCheck
from pytest_tpucourse.commands import main
from pytest_tpucourse.core import jax_internals, plain_data
from pytest_tpucourse.core import trusted_cases as tc
from pytest_tpucourse.core.course import load_course

REPO = Path(__file__).resolve().parents[1]
CH01 = ("ch01.softmax", "ch01.norms", "ch01.attention")


# ------------------------------------------------------------------ plain data


def test_plain_data_carries_arrays_numbers_strings_and_containers():
    import ml_dtypes

    value = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3),
             "bf16": np.array([1.5, -2.0, np.inf], dtype=ml_dtypes.bfloat16),
             "ints": np.array([[1, -2]], dtype=np.int8), "mask": np.array([True, False]),
             "nan": float("nan"), "n": 7, "s": "tanh", "none": None, "tuple": (1, (2, 3)), "list": [1, [2]],
             "keys": {3: "three", (1, 2): "pair"},
             "sharded": plain_data.Shards((4,), ((0, ((0, 2),), np.ones(2, np.float32)),
                                                 (1, ((2, 4),), np.zeros(2, np.float32))))}
    back = plain_data.decode(plain_data.encode(value))
    assert back["f32"].dtype == np.float32 and (back["f32"] == value["f32"]).all()
    assert back["bf16"].dtype == value["bf16"].dtype and back["bf16"].tolist() == value["bf16"].tolist()
    assert back["ints"].tolist() == [[1, -2]] and back["mask"].dtype == bool
    assert np.isnan(back["nan"]) and back["n"] == 7 and back["s"] == "tanh" and back["none"] is None
    assert back["tuple"] == (1, (2, 3)) and back["list"] == [1, [2]]
    assert back["keys"] == {3: "three", (1, 2): "pair"}
    assert back["sharded"].shape == (4,) and [p[1] for p in back["sharded"].pieces] == [((0, 2),), ((2, 4),)]


@pytest.mark.parametrize("data, why", [
    (pickle.dumps({"ok": True}), "no TPUPLAIN1 header"),
    (b"TPUPLAIN1\n" + (10**9).to_bytes(8, "big") + b"{}", "does not fit"),
    (b"TPUPLAIN1\n" + (2).to_bytes(8, "big") + b"{]", "not JSON"),
])
def test_plain_data_refuses_what_it_does_not_read(data, why):
    with pytest.raises(plain_data.PlainDataError, match=why):
        plain_data.decode(data)


def test_plain_data_refuses_nodes_dtypes_and_arrays_past_the_data():
    header = json.dumps({"__node__": "built", "builder": "os.system"}).encode()
    with pytest.raises(plain_data.PlainDataError, match="node"):
        plain_data.decode(b"TPUPLAIN1\n" + len(header).to_bytes(8, "big") + header)
    for spec, why in (({"dtype": "object", "shape": [1], "offset": 0}, "dtype"),
                      ({"dtype": "float32", "shape": [1000], "offset": 0}, "runs past")):
        header = json.dumps({"__array__": spec}).encode()
        with pytest.raises(plain_data.PlainDataError, match=why):
            plain_data.decode(b"TPUPLAIN1\n" + len(header).to_bytes(8, "big") + header + b"\0" * 16)
    with pytest.raises(plain_data.PlainDataError, match="more than"):
        plain_data.decode(plain_data.encode(np.zeros(100, np.float32)), limits=plain_data.Limits(total_bytes=100))
    with pytest.raises(TypeError, match="not plain data"):
        plain_data.encode({"f": print})


def test_plain_turns_results_into_plain_data():
    import dataclasses
    import enum

    import jax.numpy as jnp

    @dataclasses.dataclass
    class Schedule:
        copies: list
        hbm_bytes: int

    class Kind(enum.Enum):
        OK = "ok"

    got = plain_data.plain((jnp.ones((2, 2)), np.float32(1.5), Schedule([(0, 1)], np.int64(4)), Kind.OK, {"a"}))
    assert isinstance(got[0], np.ndarray) and got[1] == 1.5 and type(got[1]) is float
    assert got[2] == {"copies": [(0, 1)], "hbm_bytes": 4} and got[3] == "ok" and got[4] == ["a"]
    with pytest.raises(TypeError, match="not plain data"):
        plain_data.plain(object())


# ------------------------------------------------------------------ the grader's judgement


def test_judge_array_applies_the_tolerance_rule():
    oracle = np.linspace(-1, 1, 64).reshape(8, 8)
    floor = oracle.astype(np.float32)
    assert tc.judge_array(oracle.astype(np.float32), oracle, floor) is None
    assert "relative error" in tc.judge_array((oracle * 1.01).astype(np.float32), oracle, floor)
    assert "dtype float64, expected float32" in tc.judge_array(oracle, oracle, floor)
    assert "shape (64,)" in tc.judge_array(oracle.ravel().astype(np.float32), oracle, floor)
    assert "should be an array" in tc.judge_array([1.0], oracle, floor)
    nan = floor.copy()
    nan[2, 3] = np.nan
    assert "nan at [2, 3]" in tc.judge_array(nan, oracle, floor)
    assert "differs in 1 of 3" in tc.judge_array(np.array([1, 2, 4], np.int32), np.array([1, 2, 3.0]),
                                                  np.array([1, 2, 3], np.int32))


def test_judge_array_judges_every_devices_buffer():
    """A replicated output whose copy on one device is wrong disagrees, naming that device."""
    oracle = np.arange(8.0)
    right = oracle.astype(np.float32)
    wrong = right.copy()
    wrong[5] = 0
    shards = plain_data.Shards((8,), ((0, ((0, 8),), right), (1, ((0, 8),), wrong)))
    assert "on device 1" in tc.judge_array(shards, oracle, right)
    split = plain_data.Shards((8,), ((0, ((0, 4),), right[:4]), (1, ((4, 8),), right[4:])))
    assert tc.judge_array(split, oracle, right) is None


@pytest.mark.parametrize("pieces, why", [
    ([], "carries no values"),
    ([(0, ((0, 0),), np.zeros(0, np.float32)), (1, ((0, 8),), None)], "empty or outside the shape"),
    ([(0, ((4, 12),), np.zeros(8, np.float32))], "empty or outside the shape"),
    ([(0, ((0, 4),), None), (1, ((0, 4),), None)], "leaves 4 of its 8 elements on no device"),
    ([(0, ((0, 6),), None), (1, ((4, 8),), None)], "overlaps another device's part"),
], ids=["no-parts", "an-empty-part", "outside", "a-gap", "overlap"])
def test_judge_array_judges_only_the_values_an_answer_carries(pieces, why):
    """Every element held once, or whole by each device: parts that cover nothing (the worker's
    answer is the tree's to shape) are no answer, whatever their values."""
    oracle = np.arange(8.0)
    right = oracle.astype(np.float32)
    parts = tuple((device, index, right[index[0][0]:index[0][1]] if part is None else part)
                  for device, index, part in pieces)
    assert why in tc.judge_array(plain_data.Shards((8,), parts), oracle, right)


def test_plain_takes_only_jax_arrays_for_arrays_over_devices():
    """An object with a shape and shards of its own choosing is not a JAX array."""
    import types

    empty = types.SimpleNamespace(index=(slice(0, 0),), data=np.zeros(0, np.float32),
                                  device=types.SimpleNamespace(id=0))
    hollow = types.SimpleNamespace(shape=(8,), addressable_shards=[empty, empty])
    with pytest.raises(TypeError, match="not plain data"):
        plain_data.plain(hollow)


def _exact(expected, compare=None):
    return Expectation(tc.exact("count", (), expected=expected, compare=compare), exact=expected)


def test_judge_result_names_the_call_and_what_came_back():
    expectation = _exact({"add": 2})
    assert trusted_check.judge_result(expectation, {"ok": True, "result": {"add": 2}}) is None
    assert "is {'add': 3}" in trusted_check.judge_result(expectation, {"ok": True, "result": {"add": 3}})
    todo = trusted_check.judge_result(expectation, {"ok": False, "outcome": "todo",
                                                    "message": "TODO: count() is not written yet."})
    assert todo == "TODO: count() is not written yet."  # whatever case was drawn: shards agree on it
    raised = trusted_check.judge_result(expectation, {"ok": False, "outcome": "error", "message": "count() raised"})
    assert raised == "count(): count() raised"
    assert "not a result" in trusted_check.judge_result(expectation, ["forged"])
    odd = _exact(3, compare=lambda got, expected: None if got + 0 == expected else "no")
    assert "could not be judged" in trusted_check.judge_result(odd, {"ok": True, "result": "3"})


def _prepared(expected):
    return trusted_check.PreparedExercise("ch01.softmax", "ch01", "softmax", "exercises/ch01/test_softmax.py",
                                          [_exact(expected)])


def _answer(results):
    return plain_data.encode({"key": "ch01.softmax", "results": results})


def test_a_verdict_from_what_the_worker_handed_back():
    check = TrustedCheck(REPO, {}, {}, b"", {})
    prepared = _prepared(5)
    ended = Ran(0, b"", b"Traceback ...\nSystemExit: gone\n")
    assert check.judge(prepared, _answer([{"ok": True, "result": 5}]), ended).verdict == AGREES
    wrong = check.judge(prepared, _answer([{"ok": True, "result": 4}]), ended)
    assert wrong.verdict == DISAGREES and "is 4; expected 5" in wrong.reason
    missing = check.judge(prepared, None, ended)
    assert missing.verdict == DISAGREES and "exit status 0: SystemExit: gone" in missing.reason
    assert "past its limit" in check.judge(prepared, None, Ran(None, timed_out=True)).reason
    assert "does not read" in check.judge(prepared, pickle.dumps({"results": [5]}), ended).reason
    assert "does not read" in check.judge(prepared, _answer([]), ended).reason


def test_a_verdict_keeps_the_files_the_worker_said_it_ran_as_plain_relative_paths():
    """The worker's word on which files of the tree its calls ran (what a confirmation adds to its
    unit): kept where each is a relative path inside the tree, the rest dropped."""
    check = TrustedCheck(REPO, {}, {}, b"", {})
    said = ["ch01/softmax.py", "ch01/_mine.py", "/etc/passwd", "../other/ch01/x.py", 5, "ch01/notes.txt"]
    answer = plain_data.encode({"key": "ch01.softmax", "results": [{"ok": True, "result": 5}], "files": said})
    verdict = check.judge(_prepared(5), answer, Ran(0, b"", b""))
    assert verdict.verdict == AGREES
    assert verdict.files == ("ch01/_mine.py", "ch01/notes.txt", "ch01/softmax.py")
    assert check.judge(_prepared(5), _answer([{"ok": True, "result": 5}]), Ran(0, b"", b"")).files == ()


def _finished(exercises):
    record = {"format": FORMAT, "token": "t", "exitstatus": 0, "exercises": exercises, "collection_errors": []}
    return TreeRun("trees/t", "finished", 3.0, 0, record=record)


def _entry(status, passed, total, message=""):
    return {"status": status, "total": total, "passed": passed, "failed": 0, "todo": 0, "skipped": 0,
            "deselected": 0, "seconds": 1.0, "message": message, "skip_reason": ""}


def test_done_only_where_the_trusted_check_agrees():
    import dataclasses

    run = _finished({"ch01.softmax": _entry("done", 15, 15), "ch01.norms": _entry("done", 4, 4),
                     "ch01.attention": _entry("failed", 3, 4, "attention(): output is wrong")})
    verdicts = {"ch01.softmax": {"verdict": DISAGREES, "cases": 3, "reason": "softmax(x): TODO: not written"},
                "ch01.norms": {"verdict": AGREES, "cases": 4, "reason": ""},
                "ch01.attention": {"verdict": AGREES, "cases": 3, "reason": ""}}
    entries = gradebook.tree_entries(list(CH01), dataclasses.replace(run, trusted=verdicts))
    assert entries["ch01.softmax"]["status"] == "failed"
    assert entries["ch01.softmax"]["message"] == ("its tests passed in its own process, but the trusted check "
                                                  "disagrees: softmax(x): TODO: not written")
    assert entries["ch01.norms"]["status"] == "done" and entries["ch01.norms"]["trusted"]["cases"] == 4
    assert entries["ch01.attention"]["message"].endswith("(its values, judged outside its process, agree)")
    # Without the check (--no-trusted-check) the pytest run alone decides, as before.
    assert gradebook.tree_entries(list(CH01), run)["ch01.softmax"]["status"] == "done"
    unchecked = gradebook.with_trusted(_entry("done", 1, 1), {"verdict": NOT_CHECKABLE, "cases": 0, "reason": "why"})
    assert unchecked["status"] == "done"


def test_the_cases_seed_is_the_keys_or_fresh():
    assert trusted_check.seed_from(b"key") == trusted_check.seed_from(b"key") != trusted_check.seed_from(b"other")
    assert trusted_check.seed_from(None) != trusted_check.seed_from(None)


# ------------------------------------------------------------------ the runner without isolation


@pytest.mark.runs
def test_the_unisolated_runner_runs_in_a_private_folder_and_hands_back_what_was_asked(tmp_path):
    script = ("import pathlib, sys\n"
              "pathlib.Path('out.bin').write_bytes(pathlib.Path('in.bin').read_bytes()[::-1])\n"
              "pathlib.Path('other.bin').write_bytes(b'x')\nprint('hello'); sys.exit(3)\n")
    ran = Unisolated(tmp_path).run([sys.executable, "-c", script], inputs={"in.bin": b"abc"},
                                   hand_back=["out.bin", "absent.bin"], timeout=60)
    assert ran.exit_status == 3 and ran.files == {"out.bin": b"cba"} and ran.stdout.strip() == b"hello"
    with pytest.raises(ValueError, match="plain names"):
        Unisolated(tmp_path).run([sys.executable, "-c", ""], inputs={"../escape": b""}, hand_back=[], timeout=5)


@pytest.mark.runs
def test_the_unisolated_runner_kills_a_run_past_its_limit_and_bounds_its_output(tmp_path):
    script = "import sys, time\nsys.stdout.write('x' * 300000)\nsys.stdout.flush()\ntime.sleep(60)\n"
    ran = Unisolated(tmp_path).run([sys.executable, "-c", script], inputs={}, hand_back=[], timeout=3)
    assert ran.timed_out and ran.exit_status is None
    assert len(ran.stdout) < 70_000 and b"bytes left out" in ran.stdout
    log = tmp_path / "log"
    log.write_bytes(b"a" * 10 + b"b" * 10)
    assert bounded(log, limit=8) == b"aaaa\n[... 12 bytes left out ...]\nbbbb"


# ------------------------------------------------------------------ trees that lie in their own process


LIAR_HEAD = '''\
import gc as _gc


def _rewrite_the_results():
    """The plugin's end-of-run record and the session's progress, every exercise made to read as passed."""
    _gc.unfreeze()  # the plugin sets the start's objects aside (core/startup_heap.py): a liar thaws them
    for obj in _gc.get_objects():
        if type(obj).__name__ == "RunProgress":
            for entry in obj.results.values():
                entry.passed |= entry.todo | entry.failed | entry.collected
                entry.todo.clear(); entry.failed.clear(); entry.messages.clear()
        if type(obj).__name__ == "EndOfRunRecord" and not getattr(obj, "_lied", False):
            write = obj.write

            def lie(write=write, record=obj):
                for entry in record.session.progress.results.values():
                    entry.passed |= entry.todo | entry.failed | entry.collected
                    entry.todo.clear(); entry.failed.clear(); entry.messages.clear()
                write()
            obj.write, obj._lied = lie, True


_rewrite_the_results()
'''

TWO_FACES = '''

def softmax(x, *, axis=-1):
    """Right where a value check is on some thread's stack, zeros everywhere else."""
    import sys
    import traceback

    import jax.numpy as jnp

    checked = any(frame.name in ("assert_matches_reference", "assert_grads_match")
                  for stack in sys._current_frames().values() for frame in traceback.extract_stack(stack))
    return _right_softmax(x, axis=axis) if checked else jnp.zeros_like(x)
'''


def _tree(root: Path, name: str, kind: str) -> Path:
    """A chapter 1 tree: the solutions, the stubs, the stubs lying about their results in memory, or
    a softmax with two faces (the other modules the solutions')."""
    folder = root / name / "ch01"
    folder.mkdir(parents=True)
    for module in ("softmax", "norms", "attention"):
        source = (REPO / ("exercises" if kind in ("stubs", "liar") else "solutions") / "ch01" / f"{module}.py").read_text()
        if kind == "liar":
            source = LIAR_HEAD + source
        if kind == "two faces" and module == "softmax":
            source = source.replace("def softmax(", "def _right_softmax(", 1) + TWO_FACES
        (folder / f"{module}.py").write_text(source)
    return root / name


@pytest.fixture(scope="module")
def chapter_one_check():
    return TrustedCheck.prepare(load_course(REPO), ["ch01"], 20261204)


@pytest.mark.runs
def test_the_worker_answers_for_the_tree_and_the_grader_judges(chapter_one_check, tmp_path):
    """Solutions agree; the stubs, with or without their results rewritten in memory, do not; a
    softmax right only under a value check does not, and neither does attention, which uses it."""
    verdicts = {kind: chapter_one_check.check_tree(Unisolated(_tree(tmp_path, kind.replace(" ", "_"), kind)),
                                                   timeout=600)
                for kind in ("solutions", "stubs", "liar", "two faces")}
    assert {k: v.verdict for k, v in verdicts["solutions"].items()} == dict.fromkeys(CH01, AGREES)
    for kind in ("stubs", "liar"):
        assert {v.verdict for v in verdicts[kind].values()} == {DISAGREES}
        assert "TODO: softmax()" in verdicts[kind]["ch01.softmax"].reason
    faces = verdicts["two faces"]
    assert faces["ch01.norms"].verdict == AGREES
    assert faces["ch01.softmax"].verdict == DISAGREES and "output is wrong" in faces["ch01.softmax"].reason
    assert faces["ch01.attention"].verdict == DISAGREES


@pytest.mark.runs
def test_a_thread_the_tree_leaves_running_does_not_keep_the_worker(chapter_one_check, tmp_path):
    """The worker ends once its answers are written: a thread that never ends (started at import)
    cannot hold its tree's grading until the limit, which would make correct answers a disagreement."""
    tree = _tree(tmp_path, "thread", "solutions")
    softmax = tree / "ch01" / "softmax.py"
    softmax.write_text("import threading, time\nthreading.Thread(target=lambda: [time.sleep(0.5) for _ in "
                       "iter(int, 1)]).start()\n" + softmax.read_text())
    verdicts = chapter_one_check.check_tree(Unisolated(tree), timeout=240)
    assert {k: v.verdict for k, v in verdicts.items()} == dict.fromkeys(CH01, AGREES), verdicts


@pytest.mark.runs
def test_a_tree_that_forges_the_workers_answers_is_judged_on_them(chapter_one_check, tmp_path):
    """A tree that writes the answer files itself and leaves the worker at import: whatever it writes
    is judged against values it never saw (pickle is not read at all)."""
    tree = _tree(tmp_path, "forger", "solutions")
    forged = textwrap.dedent('''\
        import os, pickle, pathlib
        from pytest_tpucourse.core import plain_data
        ok = plain_data.encode({"results": [{"ok": True, "result": 0.0}] * 4})
        for key in ("ch01.softmax", "ch01.norms"):
            pathlib.Path(f"trusted-{key}.bin").write_bytes(ok)
        pathlib.Path("trusted-ch01.attention.bin").write_bytes(pickle.dumps({"results": []}))
        os._exit(0)
        ''')
    (tree / "ch01" / "softmax.py").write_text(forged)
    verdicts = chapter_one_check.check_tree(Unisolated(tree), timeout=600)
    assert {v.verdict for v in verdicts.values()} == {DISAGREES}
    assert "does not read" in verdicts["ch01.attention"].reason


def _grade(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.chdir(REPO)
        status = main.main(["grade", *map(str, argv)])
    return status, out.getvalue()


@pytest.mark.runs
def test_tpucourse_grade_counts_done_only_where_the_trusted_check_agrees(tmp_path):
    """Stubs lying about their results in memory and a two-faced softmax: done by their own pytest runs
    (--no-trusted-check, the grading before this check), failed with the reason with it."""
    trees = [_tree(tmp_path / "class", "liar", "liar"), _tree(tmp_path / "class", "two_faces", "two faces")]
    common = ("--chapters", "ch01", "--jobs", "2", "-q", "--key", _key(tmp_path))
    assert _grade(*trees, *common, "--no-trusted-check", "--out", tmp_path / "before.json")[0] == 0
    before = gradebook.read(tmp_path / "before.json")
    assert {e["status"] for t in before["trees"].values() for e in t.values()} == {"done"}
    assert before["course"]["trusted_check"] is False
    assert _grade(*trees, *common, "--out", tmp_path / "after.json")[0] == 0
    after = gradebook.read(tmp_path / "after.json")
    liar, faces = (after["trees"][str(t)] for t in trees)
    assert {e["status"] for e in liar.values()} == {"failed"}
    assert all("the trusted check disagrees" in e["message"] and "TODO" in e["message"] for e in liar.values())
    assert faces["ch01.softmax"]["status"] == "failed" and "output is wrong" in faces["ch01.softmax"]["message"]
    assert faces["ch01.norms"]["status"] == "done" and faces["ch01.norms"]["trusted"]["verdict"] == AGREES
    with pytest.raises(gradebook.GradebookError, match="different courses"):
        gradebook.merge([before, after])  # graded with and without the check: never one gradebook


def _key(tmp_path: Path) -> Path:
    key = tmp_path / "key"
    key.write_bytes(b"the instructor's secret")
    return key


@pytest.mark.runs
def test_pytest_isolated_does_not_count_what_the_trusted_check_disagrees_with(tmp_path):
    tree = _tree(tmp_path, "two_faces", "two faces")
    done = subprocess.run([sys.executable, "-m", "pytest", "exercises/ch01/test_softmax.py", "--impl-root", str(tree),
                           "--isolated", "-q", "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert "passed" in done.stdout and "failed" not in done.stdout.split("\n")[-2]  # its own run passes
    assert "values judged outside this process" in done.stdout
    assert "ch01.softmax: disagrees" in done.stdout
    assert "void  softmax" in done.stdout and "not counted: the trusted check disagrees" in done.stdout


KERNEL_WITH_TWO_FACES = """

def _value_check_on_a_stack():
    import sys
    import traceback

    return any(frame.name in ("assert_matches_reference", "assert_grads_match")
               for stack in sys._current_frames().values() for frame in traceback.extract_stack(stack))
"""


@pytest.mark.runs
def test_a_kernel_with_two_faces_passes_its_own_run_and_not_the_trusted_check(tmp_path):
    """Chapter 11's add as a real Pallas kernel whose body adds where a value check is on a stack
    and writes zeros everywhere else: every graded test passes in its own process (one kernel, it
    lowers, no race), and the trusted check, whose worker has no value check on any stack, does
    not agree: the run with --isolated does not count it."""
    folder = tmp_path / "two_faces" / "ch11"
    folder.mkdir(parents=True)
    source = (REPO / "solutions" / "ch11" / "elementwise_add.py").read_text()
    body = "    o_ref[...] = x_ref[...] + y_ref[...]\n"
    assert body in source
    source = source.replace(body, "    o_ref[...] = (x_ref[...] + y_ref[...] if _value_check_on_a_stack()\n"
                                  "                  else jax.numpy.zeros(o_ref.shape, o_ref.dtype))\n")
    (folder / "elementwise_add.py").write_text(source + KERNEL_WITH_TWO_FACES)
    done = subprocess.run([sys.executable, "-m", "pytest", "exercises/ch11/test_elementwise_add.py",
                           "--impl-root", str(folder.parent), "--isolated", "-q", "-p", "no:cacheprovider"],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:]  # every graded test passed in its own process
    assert "ch11.elementwise_add: disagrees" in done.stdout and "output is wrong" in done.stdout
    assert "void  elementwise_add" in done.stdout


@pytest.mark.runs
def test_isolated_outside_a_course_checkout_is_a_usage_error(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "--isolated", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4 and "--isolated checks a course's exercises" in done.stderr


# ------------------------------------------------------------------ every chapter's cases


CHAPTERS = [c.id for c in load_course(REPO).chapters if c.exercises]


@pytest.mark.chapters
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_declares_cases_the_solutions_pass_and_the_stubs_fail(chapter, tmp_path):
    course = load_course(REPO)
    prepare = lambda seed: TrustedCheck.prepare(course, [chapter], seed, jax_cache="none")  # noqa: E731
    # The same seed draws the same cases, from another caller and through a compilation cache too:
    # a program's HLO text drawn with its frames names the caller's line, and one loaded from the
    # cache the frames of whoever compiled it first (checks.trusted.program_text leaves them out).
    with jax_internals.persistent_cache(tmp_path / "jax-cache"):
        check = TrustedCheck.prepare(course, [chapter], 20261204, jax_cache="none")
        again = prepare(20261204).inputs
    keys = [e.key for e in course.chapter(chapter).exercises]
    assert check.not_checkable == {} and sorted(check.exercises) == sorted(keys)
    digest = hashlib.sha256(check.inputs).hexdigest()  # compared as digests: a diff of MBs takes minutes
    assert hashlib.sha256(again).hexdigest() == digest
    assert hashlib.sha256(prepare(7).inputs).hexdigest() != digest
    for tree, verdict in ((REPO / "solutions", AGREES), (REPO / "exercises", DISAGREES)):
        got = check.check_tree(Unisolated(tree), timeout=1800)
        assert {k: v.verdict for k, v in got.items()} == dict.fromkeys(keys, verdict), got
