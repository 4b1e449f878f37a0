"""tpucourse progress / hint / reset: what a learner sees between pytest runs."""

import io
import subprocess

import pytest

from pytest_tpucourse.commands import main
from pytest_tpucourse import roofline
from pytest_tpucourse.gates import criteria, report
from pytest_tpucourse.learner import state
from pytest_tpucourse.gates import records as rec

from .gate_helpers import gate_run, make_record
from .support import GRADED_TEST


@pytest.fixture
def course(fake_course, monkeypatch):
    fake_course.test_file(GRADED_TEST)
    monkeypatch.chdir(fake_course.pytester.path)
    return fake_course


def tpucourse(capsys, *argv):
    code = main.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_progress_before_any_run_claims_nothing(course, capsys):
    code, out, _ = tpucourse(capsys, "progress")
    assert code == 0
    assert "ch11  Pallas fundamentals          stage 1   0/1 exercises  gate 01: no gate test yet" in out
    assert "      ----  double" in out
    assert "your progress: 0/15 chapters" in out and f"gates: 0/{len(criteria.GATES)} gates passed" in out
    assert "next: ch11.double: Return 2 * x." in out
    assert "  run   pytest exercises/ch11/test_double.py" in out
    assert "  stuck? tpucourse hint ch11.double" in out
    course.test_file("", "test_gate01.py")  # the chapter has a gate test now, with nothing recorded
    assert "gate 01: awaiting hardware" in tpucourse(capsys, "progress")[1]


def test_progress_follows_runs_and_distrusts_edits(course, capsys):
    course.run()
    out = tpucourse(capsys, "progress")[1]
    assert "      TODO  double: double() in exercises/ch11/double.py is not written yet." in out
    assert "[2 tests todo]" in out and "tests failed" not in out  # pytest's word for them: todo
    course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    out = tpucourse(capsys, "progress")[1]
    assert "0/1 exercises" in out  # written, but no run has seen it pass
    course.run().assert_outcomes(passed=2)
    out = tpucourse(capsys, "progress")[1]
    assert "1/1 exercises" in out and "      done  double" in out
    assert "your progress: 1/15 chapters" in out and "next: every shipped exercise is done" in out
    course.write("exercises", "double", "def double(x):\n    return x + x  # edited\n")
    out = tpucourse(capsys, "progress")[1]
    assert "0/1 exercises" in out and "edit  double: passed, then edited: run its tests again" in out


def test_progress_shows_gate_statuses_from_the_records(course, capsys, tmp_path):
    path = course.pytester.path / rec.DEFAULT_PATH
    path.parent.mkdir()
    correct = criteria.gate(1).criterion("correct").slots[0]
    off_chip = dict(gate=1, criterion="correct", chapter="ch11", implementation="kernel", op=correct.op,
                    shapes=correct.shapes, method="off-chip-verified", statistic="checks-passed", value=1.0,
                    unit="check", verdict="pass", interpret=True)
    rec.append(path, make_record(**off_chip))  # names no code: verified nothing that is here
    assert "gate 01: awaiting hardware" in tpucourse(capsys, "progress")[1]
    rec.append(path, make_record(**off_chip, modules=report.current_modules(course.pytester.path)))
    out = tpucourse(capsys, "progress")[1]
    assert "gate 01: off-chip verified, awaiting hardware" in out
    # a measured run of the matmul at 4096³ on a v5e stand-in, twice XLA's time: a fail row
    matmul = criteria.gate(1).criterion("matmul-near-xla").slots[0]
    run = gate_run(tmp_path, gate=1, seconds={"floor": 1e-4, "kernel": 2e-4})
    run.measure_trio("matmul-near-xla", matmul.op, matmul.shapes, matmul.dtype, roofline.Cost(1e9, 1e6),
                     floor=lambda x: x, kernel=lambda x: x, ceiling=None, inputs=lambda seed: (float(seed),))
    with path.open("a") as records:
        records.write((tmp_path / "r.jsonl").read_text())
    out = tpucourse(capsys, "progress")[1]
    assert "gate 01: failed (v5e: matmul-near-xla)" in out and f"gates: 0/{len(criteria.GATES)} gates passed" in out


def test_hints_come_one_at_a_time_and_are_remembered(course, capsys):
    code, out, _ = tpucourse(capsys, "hint", "ch11.double")
    assert code == 0 and "hint 1/2: multiply by two" in out and "again for hint 2" in out
    out = tpucourse(capsys, "hint", "ch11")[1]  # the chapter's next unfinished exercise
    assert "hint 2/2: really, just x * 2" in out and "last hint" in out
    out = tpucourse(capsys, "hint")[1]
    assert "hint 2/2" in out
    out = tpucourse(capsys, "hint", "ch11.double", "--all")[1]
    assert "hint 1/2: multiply by two" in out and "hint 2/2: really, just x * 2" in out
    assert state.read(course.pytester.path)["hints"] == {"ch11.double": 2}


def test_a_done_exercise_says_it_is_done_instead_of_a_hint(course, capsys):
    course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    course.run().assert_outcomes(passed=2)
    out = tpucourse(capsys, "hint", "ch11.double")[1]
    assert "ch11.double is done" in out and "hint 1/2" not in out and "--all" in out
    assert state.read(course.pytester.path)["hints"] == {}  # no hint was spent
    assert "hint 1/2: multiply by two" in tpucourse(capsys, "hint", "ch11.double", "--all")[1]


# The graded tests, and the trusted cases `tpucourse confirm` checks outside the run's process.
CHECKED_TEST = GRADED_TEST + """

    def _trusted(rng):
        x = rng.standard_normal(16).astype(np.float32)
        return [checks.trusted.exact("double", (x,), expected=lambda x: x * 2)]

    TRUSTED = checks.trusted.Cases(_trusted)
"""
# Right where a graded test is on the stack (in its own run), zeros anywhere else.
TWO_FACES = """
import sys
import traceback

import numpy as np


def double(x):
    tested = any(frame.name.startswith("test_") for stack in sys._current_frames().values()
                 for frame in traceback.extract_stack(stack))
    return np.asarray(x) * 2 if tested else np.zeros_like(x)
"""


@pytest.mark.runs
def test_progress_says_which_done_the_trusted_check_confirmed(fake_course, monkeypatch, capsys):
    """A done by the learner's own run only, one the trusted check disagrees with (a double right only
    where a graded test calls it) and one it confirmed (`pytest --isolated`), each said as such; the
    solution is shown for a confirmed done."""
    fake_course.test_file(CHECKED_TEST)
    fake_course.write("solutions", "double", "def double(x):\n    return x * 2\n")
    monkeypatch.chdir(fake_course.pytester.path)
    fake_course.write("exercises", "double", TWO_FACES)
    fake_course.run().assert_outcomes(passed=2)
    out = tpucourse(capsys, "progress")[1]
    assert "1/1 exercises, 0 confirmed" in out
    assert ("      done  double  (your run only: `tpucourse confirm ch11` checks it outside your run's process)"
            in out)
    assert "your progress: 1/15 chapters (0 confirmed by the trusted check" in out
    code, _, err = tpucourse(capsys, "solution", "ch11.double")
    assert code == 2 and "done by your own run, not yet confirmed: `tpucourse confirm ch11`" in err
    code, out, _ = tpucourse(capsys, "confirm", "ch11")
    assert code == 1 and "ch11.double: not confirmed: the trusted check disagrees (1 cases): double(" in out
    out = tpucourse(capsys, "progress")[1]
    assert "done  double  (your run only; the trusted check disagrees: double(" in out
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.run("--isolated").assert_outcomes(passed=2)
    out = tpucourse(capsys, "progress")[1]
    assert "1/1 exercises, 1 confirmed" in out and "done  double  (confirmed: the trusted check agrees)" in out
    assert "your progress: 1/15 chapters (1 confirmed by the trusted check" in out
    code, out, _ = tpucourse(capsys, "solution", "ch11.double")
    assert code == 0 and out.startswith("# solutions/ch11/double.py\n")
    fake_course.write("exercises", "double", "def double(x):\n    return x + x\n")  # other bytes: not confirmed
    fake_course.run().assert_outcomes(passed=2)
    assert "done  double  (your run only: `tpucourse confirm ch11`" in tpucourse(capsys, "progress")[1]


@pytest.mark.runs
@pytest.mark.parametrize("helper, graded", [
    ("_mine.py", "from ._mine import twice\n\n\ndef double(x):\n    return twice(x)\n"),
    ("notes.txt", "from pathlib import Path\n\nexec(compile(Path(__file__).with_name('notes.txt').read_text(), "
                  "str(Path(__file__).with_name('notes.txt')), 'exec'))\n\n\ndef double(x):\n    return twice(x)\n"),
])
def test_a_helper_changed_after_a_confirm_voids_done_and_confirmed(fake_course, monkeypatch, capsys, helper, graded):
    """A kernel is all the code it runs: a helper module it imports, or a file it execs, swapped after
    the trusted check confirmed it, voids its done and its confirmation as an edit of the graded file does."""
    fake_course.test_file(CHECKED_TEST)
    monkeypatch.chdir(fake_course.pytester.path)
    fake_course.write("exercises", "double", graded)
    chapter = fake_course.pytester.path / "exercises" / "ch11"
    (chapter / helper).write_text("import numpy as np\n\n\ndef twice(x):\n    return np.asarray(x) * 2\n")
    fake_course.run().assert_outcomes(passed=2)
    unit = state.read(fake_course.pytester.path)["exercises"]["ch11.double"]["unit"]
    assert set(unit) == {"exercises/ch11/double.py", f"exercises/ch11/{helper}"}
    code, out, _ = tpucourse(capsys, "confirm", "ch11")
    assert code == 0 and "ch11.double: confirmed" in out
    assert "done  double  (confirmed: the trusted check agrees)" in tpucourse(capsys, "progress")[1]
    (chapter / "later.txt").write_text("twice = lambda x: 0 * x\n")  # a file added since: not what was confirmed
    assert "done  double  (your run only" in tpucourse(capsys, "progress")[1]
    (chapter / "later.txt").unlink()
    assert "done  double  (confirmed: the trusted check agrees)" in tpucourse(capsys, "progress")[1]
    (chapter / helper).write_text("import numpy as np\n\n\ndef twice(x):\n    return np.zeros_like(x)\n")
    out = tpucourse(capsys, "progress")[1]
    assert "edit  double: passed, then edited: run its tests again" in out and "0/1 exercises" in out
    code, _, err = tpucourse(capsys, "solution", "ch11.double")
    assert code == 2 and "its solution is shown once" in err
    code, out, _ = tpucourse(capsys, "confirm", "ch11")
    assert code == 2 and "ch11.double: edited since it passed: not checked" in out


@pytest.mark.parametrize("edit", ["removed", "altered"])
def test_a_solution_read_mark_removed_or_altered_by_hand_reads_tampered(course, capsys, edit):
    """The "read before it was confirmed done" mark is sealed like every entry of the state file, and
    the exercise's entries carry its seal: deleting it, or turning it into a read after, shows."""
    import json

    course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    course.run().assert_outcomes(passed=2)
    code, out, _ = tpucourse(capsys, "solution", "ch11.double", "--force")
    assert code == 0 and "(read before the exercise was confirmed done)" in out
    assert "(its solution was read before it was confirmed done)" in tpucourse(capsys, "progress")[1]
    path = course.pytester.path / ".tpucourse" / "state.json"
    data = json.loads(path.read_text())
    if edit == "removed":
        del data["solutions_read"]["ch11.double"]
    else:
        data["solutions_read"]["ch11.double"]["before_done"] = False
    path.write_text(json.dumps(data))
    out = tpucourse(capsys, "progress")[1]
    assert "(its solution-read mark was removed or altered by hand: tampered)" in out
    course.run().assert_outcomes(passed=2)  # a later run keeps the mark's seal in the entry it writes
    assert "tampered" in tpucourse(capsys, "progress")[1]


def test_confirm_checks_only_what_runs_found_done(course, capsys):
    code, out, err = tpucourse(capsys, "confirm", "ch11")
    assert code == 2 and "ch11.double: not run yet: not checked" in out
    assert "ch11: nothing done to confirm: run pytest on it first" in err
    assert "ch99: no chapter" in tpucourse(capsys, "confirm", "ch99")[2]


def test_a_done_chapter_says_it_is_done_instead_of_naming_one_of_its_exercises(course, capsys):
    course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    course.run().assert_outcomes(passed=2)
    out = tpucourse(capsys, "hint", "ch11")[1]
    assert "ch11 (chapter 11 Pallas fundamentals) is done: the tests of its 1 exercise passed (double)" in out
    assert "ch11.double is done" not in out and "hint 1/2" not in out
    assert state.read(course.pytester.path)["hints"] == {}


@pytest.mark.parametrize("target, message", [
    ("ch99", "no chapter 'ch99'"),
    ("ch11.triple", "ch11 has no exercise 'triple'; it has double"),
])
def test_hint_names_what_is_wrong(course, capsys, target, message):
    code, _, err = tpucourse(capsys, "hint", target)
    assert code == 2 and message in err


def test_commands_outside_a_course_say_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = tpucourse(capsys, "progress")
    assert code == 2 and "no course.toml at or above" in err


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_reset_refuses_outside_git(course, capsys):
    code, _, err = tpucourse(capsys, "reset", "ch11.double", "--yes")
    assert code == 2 and "is not a git checkout, so the shipped stub is unknown" in err


@pytest.fixture
def git_course(course):
    root = course.pytester.path
    _git(root, "init", "-q")
    _git(root, "add", "course.toml", "exercises/ch11/double.py")
    _git(root, "commit", "-q", "-m", "stub")
    return course


def test_reset_backs_up_and_restores_the_shipped_stub(git_course, capsys, monkeypatch):
    root = git_course.pytester.path
    shipped = (root / "exercises/ch11/double.py").read_text()
    git_course.write("exercises", "double", "def double(x):\n    return x * 2  # mine\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, _, err = tpucourse(capsys, "reset", "ch11.double")
    assert code == 2 and "holds your work: pass --yes" in err  # not a terminal: never asks
    assert "# mine" in (root / "exercises/ch11/double.py").read_text()
    code, out, _ = tpucourse(capsys, "reset", "ch11.double", "--yes")
    assert code == 0 and "exercises/ch11/double.py is back as shipped" in out
    assert (root / "exercises/ch11/double.py").read_text() == shipped
    backups = list((root / ".tpucourse" / "backups").glob("ch11.double-*.py"))
    assert len(backups) == 1 and "# mine" in backups[0].read_text()
    assert "already as shipped" in tpucourse(capsys, "reset", "ch11.double")[1]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("answer, kept", [("n\n", True), ("\n", True), ("y\n", False)])
def test_reset_asks_on_a_terminal(git_course, capsys, monkeypatch, answer, kept):
    root = git_course.pytester.path
    git_course.write("exercises", "double", "def double(x):\n    return x * 2  # mine\n")
    monkeypatch.setattr("sys.stdin", _Terminal(answer))
    code, out, _ = tpucourse(capsys, "reset", "ch11.double")
    assert "[y/N]" in out
    assert ("# mine" in (root / "exercises/ch11/double.py").read_text()) == kept
    assert code == (1 if kept else 0)


def test_reset_of_a_file_not_shipped(git_course, capsys):
    code, _, err = tpucourse(capsys, "reset", "ch11.helper", "--yes")
    assert code == 2 and "exercises/ch11/helper.py is not in git HEAD" in err


def test_self_test_ticks_are_the_learners_word(tmp_path, monkeypatch, capsys):
    """`tpucourse tick`: a chapter's "Can you" items, kept in the state file and shown by
    progress as self-reported; they complete no exercise."""
    from .support import REPO

    (tmp_path / "course.toml").write_text((REPO / "course.toml").read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    code, out, _ = tpucourse(capsys, "tick", "ch15", "3")
    assert code == 0 and "  [x] 3. Show a benchmark record" in out and "  [ ] 1. State the gap" in out
    assert "self-reported" in out
    progress = tpucourse(capsys, "progress")[1]
    assert "      can you: 1/7 ticked (self-reported, tpucourse tick ch15)" in progress
    assert "your progress: 0/15 chapters" in progress
    assert tpucourse(capsys, "tick", "ch15", "3", "--undo")[1].endswith("can you: 0/7 ticked "
                                                                       "(self-reported, tpucourse tick ch15)\n")
    code, _, err = tpucourse(capsys, "tick", "ch15", "8")
    assert code == 2 and "items 1-7, not 8" in err
    code, _, err = tpucourse(capsys, "tick", "ch11", "1")
    assert code == 2 and "has no self-test items" in err
