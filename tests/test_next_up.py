"""One rule for "how far" and "what next": the run's summary, `tpucourse progress` and a bare
`tpucourse hint` agree, seen as the learner sees them."""

import textwrap

import pytest

from pytest_tpucourse import chips
from pytest_tpucourse.commands import main
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.learner import next_up, state

from .support import FAKE_COURSE_TOML, FAKE_TPU_CONFTEST, GRADED_TEST

CH01 = """
[[chapters]]
id = "ch01"
title = "JAX"
kind = "layer"

[[chapters.exercises]]
name = "triple"
function = "triple"
summary = "Return 3 * x."
hints = ["multiply by three"]

"""

NEGATE = """
[[chapters.exercises]]
name = "negate"
function = "negate"
summary = "Return -x."
hints = ["a minus sign"]
"""

# The fake course's ch11 (double) with ch01 (triple) before it and a second exercise after double.
TWO_CHAPTERS = FAKE_COURSE_TOML.replace("[[chapters]]", CH01 + "[[chapters]]", 1) + NEGATE

NEGATE_TEST = """
    import numpy as np
    from pytest_tpucourse import checks

    def test_negate(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.negate.negate(x), -x.astype(np.float64), fn=impl.negate.negate,
                            dtype=np.float32)
"""

TRIPLE_TEST = """
    import numpy as np
    from pytest_tpucourse import checks

    def test_triple(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.triple.triple(x), 3 * x.astype(np.float64), fn=impl.triple.triple,
                            dtype=np.float32)
"""


@pytest.fixture
def course(fake_course, monkeypatch):
    """ch01.triple (a stub) and ch11.double, ch11.negate; double written correctly, negate wrong."""
    root = fake_course.pytester.path
    (root / "course.toml").write_text(TWO_CHAPTERS)
    fake_course.test_file(GRADED_TEST)
    fake_course.test_file(NEGATE_TEST, "test_negate.py")
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.write("exercises", "negate", "def negate(x):\n    return x\n")
    (root / "exercises" / "ch01").mkdir()
    (root / "exercises" / "ch01" / "triple.py").write_text(
        'def triple(x):\n    raise NotImplementedError("write triple()")\n')
    (root / "exercises" / "ch01" / "test_triple.py").write_text(textwrap.dedent(TRIPLE_TEST))
    monkeypatch.chdir(root)
    return fake_course


def tpucourse(capsys, *argv) -> str:
    assert main.main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_run_of_one_file_counts_the_chapter_as_progress_does(course, capsys):
    course.run("exercises/ch11/test_double.py").assert_outcomes(passed=2)
    result = course.run("exercises/ch11/test_negate.py")
    result.assert_outcomes(failed=1)
    summary = result.stdout.str()
    # double passed in the earlier run and is unchanged: this run's summary counts it, as progress does
    assert "chapter 11 Pallas fundamentals: 1/2 exercises" in summary
    assert "next: ch11.negate: edit exercises/ch11/negate.py, then pytest exercises/ch11/test_negate.py" in summary
    progress = tpucourse(capsys, "progress")
    assert "ch11  Pallas fundamentals          stage 1   1/2 exercises" in progress
    assert "next: ch11.negate: Return -x." in progress


def test_progress_and_hint_stay_in_the_chapter_being_worked_on(course, capsys):
    course.run("exercises/ch11/test_negate.py").assert_outcomes(failed=1)
    # ch01.triple comes first in the course and is not done, but the learner works in ch11
    assert "next: ch11.double: Return 2 * x." in tpucourse(capsys, "progress")
    out = tpucourse(capsys, "hint")
    assert out.startswith("ch11.double: edit exercises/ch11/double.py\nhint 1/2: multiply by two")
    course.run("exercises/ch11/test_double.py").assert_outcomes(passed=2)
    assert "next: ch11.negate: Return -x." in tpucourse(capsys, "progress")
    assert tpucourse(capsys, "hint").startswith("ch11.negate: edit exercises/ch11/negate.py\nhint 1/1")


def test_after_a_pass_the_summary_says_what_is_next(course):
    course.write("exercises", "negate", "def negate(x):\n    return -x\n")
    summary = course.run("exercises/ch11/test_negate.py").stdout.str()
    assert "  done  negate             1/1 tests passed" in summary
    assert "next: ch11.double: edit exercises/ch11/double.py, then pytest exercises/ch11/test_double.py" in summary
    summary = course.run("exercises/ch11").stdout.str()
    assert "chapter 11 Pallas fundamentals: 2/2 exercises" in summary
    # the chapter is finished: then the course order, from the start
    assert "next: ch01.triple: edit exercises/ch01/triple.py, then pytest exercises/ch01/test_triple.py" in summary


def test_a_filtered_run_says_not_run_for_what_it_left_out(course):
    summary = course.run("exercises/ch11", "-k", "negate").stdout.str()
    assert "  ----  double             not run (2 tests not selected)" in summary
    assert "  FAIL  negate             0/1 tests passed" in summary


def test_a_run_stopped_early_says_so_for_what_it_never_reached(course):
    course.write("exercises", "double", 'def double(x):\n    raise NotImplementedError("write double()")\n')
    summary = course.run("exercises/ch11", "-x").stdout.str()
    assert "  TODO  double             0/2 tests passed" in summary
    assert "  ----  negate             not run (the run ended before its 1 test finished)" in summary


NEGATE_AND_ITS_NOTES_TEST = NEGATE_TEST + """
    import pytest
    from pytest_tpucourse.checks import WrongResult

    @pytest.mark.edits("NOTES.md")
    def test_the_notes_are_written(impl):
        impl.negate.negate(np.zeros(1, np.float32))
        raise WrongResult("NOTES.md: no section '## Why'")
"""


def test_when_only_a_file_beside_the_module_fails_next_names_that_file(course):
    """A test marked @pytest.mark.edits("NOTES.md") grades a file next to the module (chapter
    15's WRITEUP.md): when only such tests fail, next says to edit that file."""
    course.test_file(NEGATE_AND_ITS_NOTES_TEST, "test_negate.py")
    course.write("exercises", "negate", "def negate(x):\n    return -x\n")
    summary = course.run("exercises/ch11").stdout.str()  # double done: negate is next
    assert "next: ch11.negate: edit exercises/ch11/NOTES.md, then pytest exercises/ch11/test_negate.py" in summary
    course.write("exercises", "negate", "def negate(x):\n    return x\n")
    summary = course.run("exercises/ch11/test_negate.py").stdout.str()
    assert "next: ch11.negate: edit exercises/ch11/negate.py, then pytest exercises/ch11/test_negate.py" in summary


def test_after_a_chapter_done_natively_on_a_tpu_the_summary_names_confirm_then_the_gate(course):
    """The first TPU hour's sequence (README, "On a TPU VM"): the chapter natively, `tpucourse confirm`,
    the gate. A run on a CPU names no chip step."""
    course.write("exercises", "negate", "def negate(x):\n    return -x\n")
    assert "next on this chip" not in course.run("exercises/ch11").stdout.str()  # a CPU: no chip step
    course.pytester.makeconftest(FAKE_TPU_CONFTEST)  # JAX's default backend says a TPU v5e
    summary = course.run("exercises/ch11").stdout.str()
    assert "chapter 11 Pallas fundamentals: 2/2 exercises" in summary
    assert ("next on this chip: tpucourse confirm ch11, then pytest exercises/ch11 --gates --chip=v5e (gate 01 "
            "times only kernels the trusted check has confirmed)") in summary
    root = course.pytester.path
    modules = {key: state.file_digest(root / "exercises" / "ch11" / f"{key.split('.')[1]}.py")
               for key in ("ch11.double", "ch11.negate")}
    state.record_confirmations(root, {key: {"verdict": "agrees", "cases": 3} for key in modules}, modules, "a test")
    summary = course.run("exercises/ch11").stdout.str()
    assert "next on this chip: pytest exercises/ch11 --gates --chip=v5e (gate 01)" in summary
    course_now, data = load_course(root), state.read(root)
    v5e = chips.get_chip("v5e")
    assert next_up.next_on_chip(course_now, data, ["ch11"], v5e) in summary
    assert next_up.next_on_chip(course_now, data, ["ch11"], v5e, frozenset({1})) is None  # its gate passed
    course.write("exercises", "negate", "def negate(x):\n    return x\n")  # not done: no chip step yet
    assert "next on this chip" not in course.run("exercises/ch11").stdout.str()
