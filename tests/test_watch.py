"""tpucourse watch: a save re-runs the tests it concerns, said at once; the test the save most
likely broke runs first and answers while the rest run; then how the exercise stands, a failing
one by its most telling failure, and what is next; a run that dies does not take the watcher
down. With the rule of what is telling (learner/telling.py), which the run's summary follows
too, and the history that picks the first test (learner/run_history.py)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_tpucourse import checks
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.core.outcomes import GradingOutcome, first_line
from pytest_tpucourse.grading import deadline, messages
from pytest_tpucourse.learner import run_history, state, telling
from pytest_tpucourse.learner.run_history import FAILED, PASSED, TODO, RanTest

from .support import DEFAULT_SIGINT, GRADED_TEST

WATCH = [sys.executable, "-m", "pytest_tpucourse.commands.main", "watch"]
NO_CACHE = "--pytest-args=-p no:cacheprovider"


class Watcher:
    """A watcher child; its output read as it comes."""

    started: list["Watcher"] = []  # ended after each test, passed or not (_no_watcher_left)

    def __init__(self, root, *args, command=WATCH):
        # A session of its own: Ctrl-C in a terminal reaches the watcher and its run together.
        self.process = subprocess.Popen([*command, *args, NO_CACHE], cwd=root, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        Watcher.started.append(self)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, count: int = 1, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while self.out.count(text) < count:
            assert time.monotonic() < deadline and self.process.poll() is None, self.out
            time.sleep(0.1)

    def finish(self, seconds: float = 90) -> int:
        code = self.process.wait(seconds)
        self.reader.join(5)
        return code


@pytest.fixture(autouse=True)
def _no_watcher_left():
    """A test that fails while its watcher waits for changes leaves no watcher behind."""
    yield
    while Watcher.started:
        watcher = Watcher.started.pop()
        if watcher.process.poll() is None:
            os.killpg(watcher.process.pid, signal.SIGKILL)
            watcher.process.wait(30)


def test_one_run_of_a_chapter_names_the_exercise_and_the_hint_command(fake_course):
    fake_course.test_file(GRADED_TEST)
    done = subprocess.run([*WATCH, "ch11", "--max-runs", "1", NO_CACHE],
                          cwd=fake_course.pytester.path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "watch: running exercises/ch11\n" in out
    assert "1 todo" in out  # a function not written yet ends the run at its first TODO
    assert "watch: ch11.double is not written yet: double() in exercises/ch11/double.py is not written yet." in out
    assert "  edit exercises/ch11/double.py; stuck? tpucourse hint ch11.double" in out
    assert done.returncode == 1


def test_without_watchfiles_watch_says_in_one_line_what_to_install(monkeypatch, capsys):
    """A TPU VM set up with `jax[tpu]` and the course's runtime alone may lack it: the command stops in one line."""
    from pytest_tpucourse.commands import main

    monkeypatch.setitem(sys.modules, "watchfiles", None)
    assert main.main(["watch", "--max-runs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpucourse watch: needs watchfiles: pip install watchfiles") and err.count("\n") == 1, err


def test_a_save_reruns_only_its_exercise_and_says_so_at_once(fake_course):
    fake_course.test_file(GRADED_TEST)
    fake_course.test_file(GRADED_TEST.replace("def test_double(", "def test_double_thrice("), "test_other.py")
    root = fake_course.pytester.path
    watcher = Watcher(root, "--max-runs", "3")  # no target: the next exercise, ch11.double
    watcher.wait_for("waiting for changes")
    assert "watch: running test_double.py\n" in watcher.out
    assert "each run forked from this warm process" in watcher.out
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    watcher.wait_for("changed: exercises/ch11/double.py, running test_double.py\n")
    watcher.wait_for("waiting for changes", 2)
    assert "2 passed" in watcher.out  # test_double.py's two tests, not test_other.py's
    assert "watch: ch11.double is done\nnext: every shipped exercise is done\n" in watcher.out
    fake_course.write("exercises", "helpers", "SCALE = 2\n")  # no exercise owns it: the chapter
    watcher.wait_for("changed: exercises/ch11/helpers.py, running exercises/ch11\n")
    assert watcher.finish() == 0, watcher.out
    assert "4 passed" in watcher.out
    assert "watch: every exercise of ch11 is done" in watcher.out


def test_a_run_that_dies_leaves_the_watcher_watching(fake_course):
    fake_course.test_file(GRADED_TEST)
    watcher = Watcher(fake_course.pytester.path, "ch11.double", "--max-runs", "3")
    watcher.wait_for("waiting for changes")
    fake_course.write("exercises", "double", "import os, signal\n\n\ndef double(x):\n"
                      "    os.kill(os.getpid(), signal.SIGKILL)\n")
    watcher.wait_for("changed: exercises/ch11/double.py, running test_double.py")
    watcher.wait_for("waiting for changes", 2)
    assert "watch: the run was killed by SIGKILL before it ended; the watch goes on" in watcher.out
    fake_course.write("exercises", "double", "def double(x):\n    return x + x\n")
    assert watcher.finish() == 0, watcher.out
    assert "watch: ch11.double is done" in watcher.out


def test_ctrl_c_during_a_run_stops_the_run_and_the_watch(fake_course):
    fake_course.test_file(GRADED_TEST)
    # Python's own SIGINT handling, even where this suite runs with SIGINT ignored
    command = [sys.executable, "-c", DEFAULT_SIGINT + "import sys; from pytest_tpucourse.commands import main; "
               "sys.exit(main.main(sys.argv[1:]))", "watch"]
    watcher = Watcher(fake_course.pytester.path, "ch11.double", command=command)
    watcher.wait_for("waiting for changes")
    started = fake_course.pytester.path / "started"
    fake_course.write("exercises", "double", f"import time\n\n\ndef double(x):\n"
                      f"    open({str(started)!r}, 'w').close()\n    time.sleep(120)\n")
    deadline = time.monotonic() + 60
    while not started.exists():  # the run is inside the learner's function
        assert time.monotonic() < deadline, watcher.out
        time.sleep(0.1)
    os.killpg(watcher.process.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    start = time.monotonic()
    watcher.finish(60)
    assert time.monotonic() - start < 20, watcher.out
    assert "KeyboardInterrupt" in watcher.out and "Traceback" not in watcher.out
    assert "  ----  double             not run (the run ended before its 2 tests finished)" in watcher.out
    state.read(fake_course.pytester.path)  # still a whole state file


# ---------------------------------------------------------------- what is telling (learner/telling.py)

FN = checks.graded(lambda x: x, "matmul() in exercises/ch11/matmul.py")
RAISES = checks.graded(lambda x: x + 1, "matmul() in exercises/ch11/matmul.py")


def _headline(check) -> str:
    """The headline of the report a check of the course raises."""
    with pytest.raises(GradingOutcome) as raised:
        check()
    return raised.value.headline


REF = np.arange(1.0, 5.0)

# Headlines of the kernel checks, as the course's own code words them (chapter 11's and 6's
# shipped mutants end in these), made here without running a kernel.
RACE = tpu_rules._unclean_exit(FN, SimpleNamespace(detect_races=True, num_cores_or_threads=2), "RACE DETECTED",
                               tpu_rules.RACE_BETWEEN_CORES).headline
OUT_OF_BOUNDS = messages.exception_headline(FN.display, IndexError(  # the interpreter's words
    'Out-of-bounds block index (1, 0) for input "x_ref" in iteration (0, 0) on device 0 (core 0)'), None, None)
_STUCK = deadline.DeadlineExceeded(5, still_running=False)
_STUCK.deadlock = True
DEADLOCK = first_line(messages.deadline_message(FN.display, _STUCK))
PAST_DEADLINE = first_line(messages.deadline_message(FN.display, deadline.DeadlineExceeded(5, still_running=False)))
REFUSED = first_line(tpu_rules._lowering_refused(
    FN, ValueError("Unimplemented primitive in Pallas TPU lowering: erf_inv"), None, (), {}))
NO_KERNEL = ('softmax() in exercises/ch11/softmax.py contains no pallas_call: it computes the answer with exp, '
             'reduce_max instead of a Pallas kernel.')


def test_each_report_of_the_course_has_its_kind():
    nan = _headline(lambda: checks.assert_close(np.full(4, np.nan, np.float32), REF, fn=FN, dtype=np.float32))
    values = _headline(lambda: checks.assert_close((REF * 3).astype(np.float32), REF, fn=FN, dtype=np.float32))
    exact = _headline(lambda: checks.assert_close(np.zeros(4, np.int32), REF, fn=FN, dtype=np.int32))
    dtype = _headline(lambda: checks.assert_close(REF.astype(np.float64), REF, fn=FN, dtype=np.float32))
    shape = _headline(lambda: checks.assert_close(REF[:3].astype(np.float32), REF, fn=FN, dtype=np.float32))
    raised = _headline(lambda: RAISES(None))  # the graded call raises TypeError: its headline names it
    todo = "TODO: matmul() in exercises/ch11/matmul.py is not written yet."
    expected = {todo: telling.NOT_WRITTEN, RACE: telling.RACE, OUT_OF_BOUNDS: telling.OUT_OF_BOUNDS,
                DEADLOCK: telling.HANG, PAST_DEADLINE: telling.HANG, REFUSED: telling.REFUSED, raised: telling.RAISED,
                dtype: telling.DTYPE_OR_SHAPE, shape: telling.DTYPE_OR_SHAPE, NO_KERNEL: telling.VERDICT,
                values: telling.VALUES, exact: telling.VALUES, nan: telling.NON_FINITE}
    assert {headline: telling.kind_of(headline) for headline in expected} == expected
    assert raised.startswith("matmul() in exercises/ch11/matmul.py raised TypeError")
    assert {kind for kind in expected.values()} == set(telling.KINDS)  # every kind has its example here


def test_a_structural_verdict_beats_a_value_mismatch_and_a_nan_report():
    nan = _headline(lambda: checks.assert_close(np.full(4, np.nan, np.float32), REF, fn=FN, dtype=np.float32))
    values = _headline(lambda: checks.assert_close((REF * 3).astype(np.float32), REF, fn=FN, dtype=np.float32))
    # a "parallel" k axis: two NaN reports, then the race check
    assert telling.most_telling([nan, nan.replace("4 NaN", "2 NaN"), RACE]) == RACE
    raised = _headline(lambda: RAISES(None))
    assert telling.by_telling([nan, values, NO_KERNEL, raised, OUT_OF_BOUNDS]) == [
        OUT_OF_BOUNDS, raised, NO_KERNEL, values, nan]
    assert telling.by_telling([values, values + " again"]) == [values, values + " again"]  # one kind: as they ran
    assert telling.most_telling([]) is None


# ---------------------------------------------------------------- which test runs first (learner/run_history.py)

F = "exercises/ch11/test_matmul.py::"


def _recorded(root, *runs):
    for results in runs:
        run_history.record_run(root, [RanTest(F + name, *rest) for name, *rest in results], token="t")
    return run_history.read(root)


def test_the_first_test_is_the_last_failure_then_the_fastest_that_caught_a_mistake(tmp_path):
    ids = [F + name for name in ("test_f32", "test_bf16", "test_race", "test_lowers")]
    assert run_history.first_test(run_history.read(tmp_path), ids).nodeid == F + "test_f32"  # nothing known
    history = _recorded(tmp_path, [("test_f32", TODO, 0.01, "TODO: matmul() is not written yet.")])
    first = run_history.first_test(history, ids)
    assert (first.nodeid, first.why) == (F + "test_f32", "the file's first test: no earlier run says which "
                                                         "test an edit breaks")  # a TODO says nothing
    history = _recorded(tmp_path, [("test_f32", FAILED, 2.0, "matmul(): output has 8 NaN of 8 values"),
                                   ("test_bf16", FAILED, 0.9, "matmul(): output has 4 NaN of 8 values"),
                                   ("test_race", FAILED, 1.5, RACE), ("test_lowers", PASSED, 0.1)])
    first = run_history.first_test(history, ids)
    assert (first.nodeid, first.why) == (F + "test_race", "it failed last time")  # the most telling failure
    history = _recorded(tmp_path, [("test_race", PASSED, 0.7), ("test_f32", FAILED, 2.0, "output has 8 NaN of 8"),
                                   ("test_bf16", FAILED, 0.9, "output has 4 NaN of 8"), ("test_lowers", PASSED, 0.1)])
    assert run_history.first_test(history, ids).nodeid == F + "test_bf16"  # of equal kinds, the fastest
    history = _recorded(tmp_path, [(name, PASSED, seconds) for name, seconds in
                                   (("test_bf16", 1.2), ("test_f32", 1.1), ("test_race", 0.8), ("test_lowers", 0.1))])
    first = run_history.first_test(history, ids)
    # test_lowers is fastest but never caught a mistake; test_race did, and its least time is 0.7 s
    assert (first.nodeid, first.why) == (F + "test_race", "the fastest test that has caught a mistake of yours, 0.7 s")
    assert run_history.first_test(history, [F + "test_lowers"]).nodeid == F + "test_lowers"  # only what was collected


def test_a_failure_discriminates_only_beside_a_pass_and_a_todo_keeps_no_time(tmp_path):
    history = _recorded(tmp_path, [("test_f32", FAILED, 1.0, "raised TypeError"), ("test_bf16", FAILED, 1.0, "x")],
                        [("test_f32", TODO, 0.01, "TODO: x")])
    tests = history["tests"]
    assert tests[F + "test_f32"]["caught"] == 0  # every test failed: none told this kernel apart
    assert tests[F + "test_f32"]["seconds"] == [1.0] and tests[F + "test_f32"]["last"] == TODO
    assert run_history.last_run_failures(tmp_path, "t")[0]["todo"] is True
    assert run_history.last_run_failures(tmp_path, "another run") is None


def test_an_unreadable_history_is_started_afresh(tmp_path):
    path = run_history.history_path(tmp_path)
    path.parent.mkdir()
    for text in ("{not json", json.dumps({"version": 1, "runs": "x", "tests": {}}), "[]"):
        path.write_text(text)
        assert run_history.read(tmp_path) == run_history.empty()
    path.unlink()
    path.mkdir()
    assert run_history.read(tmp_path) == run_history.empty()


# ---------------------------------------------------------------- watch's runs

# Two graded tests: the first sees NaN, the second a float64 result where float32 is expected.
NAN_THEN_DTYPE_TEST = """
    import numpy as np
    from pytest_tpucourse import checks

    def test_values(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64), fn=impl.double.double, dtype=np.float32)

    def test_dtype(impl):
        x = np.arange(5, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64), fn=impl.double.double, dtype=np.float32)
"""
NAN_THEN_DTYPE = """
    import numpy as np

    def double(x):
        if x.size == 4:
            return np.full(x.shape, np.nan, dtype=np.float32)
        return (x * 2).astype(np.float64)
"""
DTYPE_HEADLINE = "double() in exercises/ch11/double.py: output has dtype float64, expected float32."


def test_a_run_shows_the_files_most_telling_failure_not_its_first(fake_course):
    fake_course.test_file(NAN_THEN_DTYPE_TEST)
    fake_course.write("exercises", "double", NAN_THEN_DTYPE)
    done = subprocess.run([*WATCH, "ch11.double", "--max-runs", "1", NO_CACHE],
                          cwd=fake_course.pytester.path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "1 failed, 1 passed" not in out and "2 failed" in out, out  # no -x: both tests ran
    verdict = out[out.index("watch: ch11.double is failing"):]
    assert verdict.startswith(f"watch: ch11.double is failing: {DTYPE_HEADLINE}\n"
                              f"  the most telling of its 2 failing tests: test_dtype (a wrong dtype or shape)\n"), out


def test_the_run_summary_and_the_state_file_lead_with_the_most_telling_failure(fake_course):
    fake_course.test_file(NAN_THEN_DTYPE_TEST)
    fake_course.write("exercises", "double", NAN_THEN_DTYPE)
    out = fake_course.run().stdout.str()
    summary = out[out.index("  FAIL  double"):].splitlines()
    assert summary[1].strip() == DTYPE_HEADLINE and "NaN" in summary[2], out
    entry = state.read(fake_course.pytester.path)["exercises"]["ch11.double"]
    assert entry["message"] == DTYPE_HEADLINE


# The first test waits, once armed, until the watcher has shown the first answer of the run.
WAITS_FOR_THE_FIRST_ANSWER_TEST = """
    import time
    from pathlib import Path

    import numpy as np
    from pytest_tpucourse import checks

    ROOT = Path(__file__).resolve().parents[2]

    def test_waits(impl):
        if (ROOT / "armed").exists():
            deadline = time.monotonic() + 60
            while not (ROOT / "released").exists():
                assert time.monotonic() < deadline, "the first answer was not shown while this test ran"
                time.sleep(0.05)

    def test_dtype(impl):
        x = np.arange(5, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64), fn=impl.double.double, dtype=np.float32)
"""


def test_a_save_runs_the_last_failure_first_and_answers_while_the_rest_run(fake_course):
    fake_course.test_file(WAITS_FOR_THE_FIRST_ANSWER_TEST)
    fake_course.write("exercises", "double", "import numpy as np\n\n\ndef double(x):\n"
                      "    return (x * 2).astype(np.float64)\n")
    root = fake_course.pytester.path
    watcher = Watcher(root, "ch11.double", "--max-runs", "2")
    watcher.wait_for("waiting for changes")  # the first run: test_waits passed, test_dtype failed
    assert "watch: first answer, test_waits (the file's first test" in watcher.out
    (root / "armed").touch()
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    watcher.wait_for("watch: first answer, test_dtype (it failed last time): it passes; the other test runs now")
    (root / "released").touch()  # test_waits, still running, may end now
    assert watcher.finish() == 0, watcher.out
    second = watcher.out[watcher.out.index("changed: exercises/ch11/double.py"):]
    assert second.index("watch: first answer") < second.index("2 passed") < second.index("watch: ch11.double is done")
