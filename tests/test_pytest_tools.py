"""The plugin alongside pytest's own tools: -n (xdist), -k, --lf, -x, --junitxml, -p no:..."""

import json
import xml.etree.ElementTree as ET

import pytest
from .support import GRADED_TEST


SOLVED = "def double(x):\n    return x * 2\n"


def _entry(fake_course):
    data = json.loads((fake_course.pytester.path / ".tpucourse" / "state.json").read_text())
    return data["exercises"]["ch11.double"]


def test_xdist_records_done_only_when_every_test_ran(fake_course):
    pytest.importorskip("xdist")
    fake_course.write("exercises", "double", SOLVED)
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run("-n", "2", "-k", "again")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*chapter 11 Pallas fundamentals: 0/1 exercises", "*part  double*1/2 tests passed*"])
    assert (_entry(fake_course)["status"], _entry(fake_course)["tests_total"]) == ("partial", 2)
    result = fake_course.run("-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*chapter 11 Pallas fundamentals: 1/1 exercises", "*done  double*2/2 tests passed"])
    assert _entry(fake_course)["status"] == "done"


def test_xdist_records_a_todo(fake_course):
    pytest.importorskip("xdist")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run("-n", "2")
    assert result.parseoutcomes() == {"todo": 2}
    entry = _entry(fake_course)
    assert entry["status"] == "todo" and entry["message"] == "double() in exercises/ch11/double.py is not written yet."
    result.stdout.fnmatch_lines(["        double() in exercises/ch11/double.py is not written yet.  ?2 tests?"])


def test_junitxml_holds_the_todo_as_a_failure_with_the_short_message(fake_course):
    fake_course.test_file(GRADED_TEST)
    fake_course.run("--junitxml", "out.xml")
    cases = ET.parse(fake_course.pytester.path / "out.xml").getroot().iter("testcase")
    failures = [case.find("failure") for case in cases]
    assert len(failures) == 2 and all(f is not None for f in failures)
    for failure in failures:
        assert failure.text.startswith("TODO: double() in exercises/ch11/double.py is not written yet.")
        assert "Traceback" not in failure.text and "site-packages" not in failure.text


def test_lf_reruns_only_the_failures_and_claims_nothing_more(fake_course):
    fake_course.test_file(GRADED_TEST + """
    def test_unrelated():
        pass
""")
    pytester = fake_course.pytester
    assert pytester.runpytest_subprocess().parseoutcomes() == {"todo": 2, "passed": 1}
    fake_course.write("exercises", "double", SOLVED)
    result = pytester.runpytest_subprocess("--lf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*part  double*2/2 tests passed*"])
    assert _entry(fake_course)["status"] == "partial"
    pytester.runpytest_subprocess().assert_outcomes(passed=3)
    assert _entry(fake_course)["status"] == "done"


def test_a_single_test_id_never_completes_an_exercise(fake_course):
    fake_course.write("exercises", "double", SOLVED)
    fake_course.test_file(GRADED_TEST)
    fake_course.run("exercises/ch11/test_double.py::test_double").assert_outcomes(passed=1)
    assert _entry(fake_course)["status"] == "partial"


def test_x_stops_at_the_first_failure(fake_course):
    fake_course.test_file(GRADED_TEST)
    assert fake_course.run("-x").parseoutcomes() == {"todo": 1}
    assert _entry(fake_course)["status"] == "todo"


def test_disabling_other_plugins_changes_nothing(fake_course):
    fake_course.write("exercises", "double", SOLVED)
    fake_course.test_file(GRADED_TEST)
    fake_course.run("-p", "no:randomly", "-p", "no:benchmark").assert_outcomes(passed=2)
    assert _entry(fake_course)["status"] == "done"
