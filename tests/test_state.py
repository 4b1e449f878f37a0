"""The state file: written whole or not at all, by every run of the learner's tree, and only those."""

import json
import signal
import subprocess
import sys
import time

import pytest

from pytest_tpucourse.learner import state

from .support import GRADED_TEST, pytest_child

BUMPER = """
import sys
from pytest_tpucourse.learner import state
root, key = sys.argv[1], sys.argv[2]
for _ in range(25):
    state.update(root, lambda d: d["hints"].__setitem__(key, d["hints"].get(key, 0) + 1))
"""


def test_concurrent_updates_are_never_lost(tmp_path):
    writers = [subprocess.Popen([sys.executable, "-c", BUMPER, str(tmp_path), f"k{i % 2}"]) for i in range(4)]
    assert [w.wait(60) for w in writers] == [0, 0, 0, 0]
    assert state.read(tmp_path)["hints"] == {"k0": 50, "k1": 50}


KILLED_WRITER = """
import sys
from pytest_tpucourse.learner import state
root = sys.argv[1]
print("ready", flush=True)
n = 0
while True:
    n += 1
    state.update(root, lambda d: d["exercises"].__setitem__("ch11.big", {"status": "failed", "runs": [n] * 20000}))
"""


def test_a_writer_killed_mid_write_leaves_a_whole_file(tmp_path):
    state.update(tmp_path, lambda d: d["exercises"].__setitem__("ch11.big", {"status": "failed", "runs": [0]}))
    for delay in (0.3, 0.45, 0.6):
        writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        data = state.read(tmp_path)  # raises CorruptState if half-written
        assert len(set(data["exercises"]["ch11.big"]["runs"])) == 1
    leftovers = [p.name for p in (tmp_path / ".tpucourse").iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) <= 3  # at most one temp file per killed write; never the state itself


@pytest.mark.parametrize("text, why", [("{oops", "Expecting property name"),
                                       ("[" * 200_000 + "]" * 200_000, "nested deeper than the 16 levels read")],
                         ids=["not-json", "nested-200000-deep"])
def test_a_corrupt_state_file_is_named_not_guessed(tmp_path, text, why):
    (tmp_path / ".tpucourse").mkdir()
    (tmp_path / ".tpucourse" / "state.json").write_text(text)
    with pytest.raises(state.CorruptState, match=rf"state.json is not valid JSON \(.*{why}.*delete it"):
        state.read(tmp_path)


@pytest.mark.parametrize("fields", [
    {"exercises": []}, {"exercises": {"ch11.double": "done"}}, {"exercises": {"ch11.double": {"status": "great"}}},
    {"hints": {"ch11.double": "2"}}, {"hints": {"ch11.double": True}}, {"hints": []},
    {"confirmed": []}, {"confirmed": {"ch11.double": "agrees"}},
])
def test_a_wrongly_typed_state_file_is_named_not_a_traceback(tmp_path, fields):
    (tmp_path / ".tpucourse").mkdir()
    (tmp_path / ".tpucourse" / "state.json").write_text(json.dumps({"version": state.VERSION, **fields}))
    with pytest.raises(state.CorruptState, match=r"state.json has fields of the wrong type.*delete it"):
        state.read(tmp_path)


def _state(fake_course):
    return json.loads((fake_course.pytester.path / ".tpucourse" / "state.json").read_text())


def test_a_run_records_todo_then_done(fake_course):
    fake_course.test_file(GRADED_TEST)
    fake_course.run()
    entry = _state(fake_course)["exercises"]["ch11.double"]
    assert entry["status"] == "todo" and entry["tree"] == "exercises"
    assert entry["message"] == "double() in exercises/ch11/double.py is not written yet."
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.run().assert_outcomes(passed=2)
    entry = _state(fake_course)["exercises"]["ch11.double"]
    assert (entry["status"], entry["tests_passed"], entry["tests_total"]) == ("done", 2, 2)


def test_solutions_and_impl_root_runs_claim_no_learner_progress(fake_course):
    fake_course.test_file(GRADED_TEST)
    fake_course.run("--solutions").assert_outcomes(passed=2)
    fake_course.run("--impl-root", str(fake_course.pytester.path / "solutions")).assert_outcomes(passed=2)
    assert not (fake_course.pytester.path / ".tpucourse" / "state.json").exists()
    fake_course.run()
    assert _state(fake_course)["exercises"]["ch11.double"]["status"] == "todo"
    fake_course.run("--solutions")
    assert _state(fake_course)["exercises"]["ch11.double"]["status"] == "todo"


def test_a_deselected_test_keeps_an_exercise_from_done(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.test_file(GRADED_TEST)
    fake_course.run("-k", "again").assert_outcomes(passed=1)
    entry = _state(fake_course)["exercises"]["ch11.double"]
    assert (entry["status"], entry["tests_passed"], entry["tests_total"]) == ("partial", 1, 2)


def test_a_failure_replaces_done_but_a_partial_run_does_not(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.test_file(GRADED_TEST)
    fake_course.run()
    fake_course.run("-k", "again")
    assert _state(fake_course)["exercises"]["ch11.double"]["status"] == "done"
    fake_course.write("exercises", "double", "def double(x):\n    return x * 3\n")
    fake_course.run("-k", "again")
    entry = _state(fake_course)["exercises"]["ch11.double"]
    assert entry["status"] == "failed" and "output is wrong" in entry["message"]


def test_an_interrupted_run_leaves_a_readable_state(fake_course):
    fake_course.write("exercises", "double", "import time\n\ndef double(x):\n    time.sleep(30)\n    return x * 2\n")
    fake_course.test_file(GRADED_TEST)
    process = subprocess.Popen(pytest_child("-p", "no:cacheprovider", "-q"),
                               cwd=fake_course.pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(6)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert b"KeyboardInterrupt" in out, out
    data = state.read(fake_course.pytester.path)  # whole, or absent: never half-written
    assert data["exercises"].get("ch11.double", {}).get("status") != "done"
    assert not list((fake_course.pytester.path / ".tpucourse").glob("*.tmp"))


THROUGH_FORWARD_TEST = GRADED_TEST + """

    def test_double_through_the_forward(impl):
        x = np.ones(3, dtype=np.float32)
        checks.assert_close(impl.forward.forward(x), 2.0 * x.astype(np.float64), fn=impl.forward.forward,
                            dtype=np.float32)
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_a_module_an_exercise_is_graded_through_is_part_of_its_unit(fake_course, workers):
    """Chapter 13's causal_skipping is graded through forward.py: an edit of the module an exercise's
    tests call voids its done, as an edit of its own module does, whichever process ran the test."""
    from pytest_tpucourse.core.course import load_course

    fake_course.test_file(THROUGH_FORWARD_TEST)
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.write("exercises", "forward", "from .double import double\n\n\ndef forward(x):\n    return double(x)\n")
    fake_course.run(*workers).assert_outcomes(passed=3)
    entry = _state(fake_course)["exercises"]["ch11.double"]
    assert entry["status"] == "done" and set(entry["unit"]) == {"exercises/ch11/double.py", "exercises/ch11/forward.py"}
    course = load_course(fake_course.pytester.path)
    exercise = course.exercise("ch11.double")
    assert state.exercise_status(course.root, state.read(course.root), exercise) == state.Status.DONE
    fake_course.write("exercises", "forward", "def forward(x):\n    return x  # stopped doubling\n")
    assert state.exercise_status(course.root, state.read(course.root), exercise) == state.Status.CHANGED


def test_a_confirmations_unit_is_the_chapters_own_files_not_the_courses_nor_other_exercises(tmp_path):
    """What a confirmation holds besides what the runs said: the learner's files in the chapter's
    folder (a helper, a text file it could exec), never the course's files there (the capstone's
    write-up, README.md), the test files, or the other exercises' modules unless a run ran them."""
    import shutil

    from pytest_tpucourse.classroom import confirmed_unit
    from pytest_tpucourse.core.course import load_course

    from .support import REPO

    shutil.copy(REPO / "course.toml", tmp_path / "course.toml")
    shutil.copytree(REPO / "exercises" / "ch15", tmp_path / "exercises" / "ch15")
    shutil.copytree(REPO / "solutions" / "ch15", tmp_path / "solutions" / "ch15")
    (tmp_path / "exercises" / "ch15" / "_tiles.py").write_text("TILE = 128\n")
    (tmp_path / "exercises" / "ch15" / "notes.txt").write_text("x = 1\n")
    (tmp_path / "exercises" / "ch15" / "autotuning" / "tpu_v5_lite").mkdir(parents=True)
    (tmp_path / "exercises" / "ch15" / "autotuning" / "tpu_v5_lite" / "window_attention.json").write_text("{}")
    course = load_course(tmp_path)
    assert confirmed_unit.unit_paths(course, "ch15.backward") == {
        "exercises/ch15/backward.py", "exercises/ch15/_tiles.py", "exercises/ch15/notes.txt",
        "exercises/ch15/autotuning/tpu_v5_lite/window_attention.json"}
    assert "exercises/ch15/forward.py" in confirmed_unit.unit_paths(course, "ch15.backward",
                                                                    ran=["exercises/ch15/forward.py"])


def test_a_unit_counts_the_tree_files_read_or_executed_not_those_only_written(tmp_path):
    """What an exercise's unit notes while a graded import or call runs: a file of the tree read,
    opened by os.open, or compiled under its own name; not a log it only writes, nor a file outside
    the tree, nor bytecode in __pycache__."""
    import os

    from pytest_tpucourse.grading import unit_files

    tree, outside = tmp_path / "tree", tmp_path / "elsewhere.txt"
    (tree / "__pycache__").mkdir(parents=True)
    for name in ("notes.txt", "raw.bin", "__pycache__/x.pyc"):
        (tree / name).write_text("x = 1\n")
    outside.write_text("y = 2\n")
    with unit_files.recording(tree) as seen:
        exec(compile((tree / "notes.txt").read_text(), str(tree / "notes.txt"), "exec"), {})
        os.close(os.open(tree / "raw.bin", os.O_RDONLY))
        (tree / "__pycache__" / "x.pyc").read_bytes()
        outside.read_text()
        (tree / "run.log").write_text("written, not run")
    assert seen.files == {str(tree / "notes.txt"), str(tree / "raw.bin")}
    unit = unit_files.digests(seen.files)
    assert unit_files.relative(unit, tmp_path) == {"tree/notes.txt": state.file_digest(tree / "notes.txt"),
                                                    "tree/raw.bin": state.file_digest(tree / "raw.bin")}
