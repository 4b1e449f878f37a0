"""tpucourse new-chapter: a new chapter, its exercises and its gate, in every place the course reads them.

The last test is the scaffold's promise: in a copy of this checkout it makes the next chapter,
with one exercise and the next gate, and the course's own checks pass there: course data and
package shape, the gate table against course.toml and the records' schema, the facts list, and the chapter's
suites (stubs TODO, solutions pass, the mutant caught), then its gate test on a CPU. It costs
two child pytest runs, 23-27 s on two shared cores (docs/speed.md, "The project's own tests").
"""

import json
import os
import re
import subprocess
import sys

import pytest

from pytest_tpucourse.authoring import scaffold, templates
from pytest_tpucourse.commands import main
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.gates import criteria

from .support import FAKE_COURSE_TOML, REPO, is_xdist_variable, readme_sections

COURSE = load_course(REPO)


def test_the_readme_template_has_the_sections_authoring_names():
    assert list(templates.README_SECTIONS) == readme_sections()
    stage = scaffold.plan(REPO, "Next", ["op"], gate=True)
    layer = scaffold.plan(REPO, "Next", ["op"])
    for chapter in (stage, layer):
        headings = re.findall(r"^## (.+)$", templates.readme(chapter), re.M)
        assert headings == [s.replace("NN", f"{chapter.gate:02d}") if s == "Gate NN" else s
                            for s in readme_sections() if s != "Gate NN" or chapter.gate is not None]


def test_the_next_chapter_stage_and_gate_are_counted_from_the_course():
    stage = scaffold.plan(REPO, "  Scaled   add ", ["axpy", "fused"], gate=True, summary="a*x + y")
    last = COURSE.chapters[-1]
    assert stage.id == f"ch{last.number + 1:02d}" and stage.title == "Scaled add"
    assert (stage.stage, stage.gate) == (last.stage + 1, len(criteria.GATES))
    assert stage.exercises == ("axpy", "fused") and stage.kind == "stage" and stage.summary == "a*x + y"
    layer = scaffold.plan(REPO, "Scaled add", ["axpy"])
    assert (layer.kind, layer.stage, layer.gate) == ("layer", None, None)


@pytest.mark.parametrize("title, exercises, message", [
    ("T", [], "at least one exercise"), (" ", ["op"], "needs a title"),
    ("T", ["Op"], "exercise name 'Op'"), ("T", ["class"], "exercise name 'class'"),
    ("T", ["test_op"], "not test_"), ("T", ["x"], "exercise name 'x'"), ("T", ["a-b"], "exercise name 'a-b'"),
    ("T", ["op", "op"], "appears twice"),
])
def test_a_chapter_that_cannot_be_named_so_is_refused(title, exercises, message):
    with pytest.raises(scaffold.ScaffoldError, match=message):
        scaffold.plan(REPO, title, exercises)


def _small_course(root):
    """A checkout with one stage chapter (gate 01 in course.toml) and the real gate table (six gates)."""
    (root / "course.toml").write_text(FAKE_COURSE_TOML)
    for path in (scaffold.GATE_TABLE, scaffold.RECORDS_SCHEMA):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text((REPO / path).read_text(encoding="utf-8"), encoding="utf-8")
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


def test_nothing_is_written_when_one_place_cannot_be(tmp_path):
    before = _small_course(tmp_path)
    chapter = scaffold.plan(tmp_path, "Next", ["op"], gate=True)
    with pytest.raises(scaffold.ScaffoldError, match=f"lists {len(criteria.GATES)} gates but course.toml 2"):
        scaffold.write(tmp_path, chapter)
    (tmp_path / "solutions" / "ch12").mkdir(parents=True)
    with pytest.raises(scaffold.ScaffoldError, match="solutions/ch12/ exists already"):
        scaffold.write(tmp_path, scaffold.plan(tmp_path, "Next", ["op"]))
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_command_is_an_authors_left_out_of_the_learners_help(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main.main(["--help"])
    assert "new-chapter" not in capsys.readouterr().out
    _small_course(tmp_path)
    assert main.main(["new-chapter", "Next", "--exercise", "op", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("chapter 12 Next: wrote 6 places\n")
    for path in ("course.toml", "exercises/ch12/README.md", "exercises/ch12/op.py", "exercises/ch12/test_op.py",
                 "solutions/ch12/op.py", "tests/mutants/ch12.toml"):
        assert f"  {path}: " in out and (tmp_path / path).is_file()
    assert "only you can write" in out and "tests/mutants/ch12.toml: a mutant per mistake" in out
    assert load_course(tmp_path).chapter("ch12").exercise("op").function == "op"
    assert main.main(["new-chapter", "Next", "--exercise", "op", "--root", str(tmp_path), "--gate"]) == 2
    assert "nothing was written" in capsys.readouterr().err


def course_copy(destination):
    """The checkout's files (tracked, and new ones git does not ignore) copied to `destination`."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            (destination / name).write_bytes(source.read_bytes())
    return destination


@pytest.mark.runs
def test_a_new_chapter_with_a_gate_passes_the_courses_own_checks(tmp_path, capsys):
    if not (REPO / ".git").exists():
        pytest.skip("needs a git checkout of the course to copy")
    copy = course_copy(tmp_path / "course")
    assert main.main(["new-chapter", "Scaled add", "--exercise", "axpy", "--gate", "--root", str(copy)]) == 0
    chapter = load_course(copy).chapters[-1]
    assert (chapter.id, chapter.gate) == (f"ch{COURSE.chapters[-1].number + 1:02d}", len(criteria.GATES))
    assert "wrote 12 places" in capsys.readouterr().out
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
           and not is_xdist_variable(k)}
    env.update(PYTHONPATH=str(copy), HOME=str(tmp_path), PY_COLORS="0")  # the copy's package, edited

    def pytest_in_copy(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=900)

    checks = pytest_in_copy("tests/test_course.py", "tests/test_package_shape.py", "tests/test_gates.py",
                            "tests/test_records.py", "tests/facts/test_facts_list.py",
                            "tests/test_grading_chapters.py", "-m", "not runs", "-v",
                            "-k", f"{chapter.id} or not test_grading_chapters", f"--basetemp={tmp_path / 'checks'}")
    assert checks.returncode == 0, checks.stdout[-4000:]
    gate_label = criteria.Gate(chapter.gate, chapter.id, chapter.title, (), "project").label
    for test in (f"test_course.py::test_stub_solution_and_tests_exist_with_one_signature[{chapter.id}.axpy]",
                 f"test_course.py::test_chapter_readme_has_the_sections_in_order[{chapter.id}]",
                 f"test_course.py::test_every_mutant_applies_to_its_solution[{chapter.id}]",
                 f"test_gates.py::test_a_gates_kernels_are_its_chapters_functions_and_its_test_runs_them[{gate_label}]",
                 "test_records.py::test_the_schemas_gate_bounds_are_the_gate_tables",
                 "test_facts_list.py::test_every_cited_readme_line_is_in_its_chapter",
                 f"test_grading_chapters.py::test_stubs_are_reported_todo[{chapter.id}]",
                 f"test_grading_chapters.py::test_solutions_pass[{chapter.id}]",
                 f"test_grading_chapters.py::test_mutant_is_caught_by_exactly_its_tests[{chapter.id}.axpy_drops_the_factor]"):
        assert f"{test} PASSED" in checks.stdout, test
    records = tmp_path / "records.jsonl"
    gate = pytest_in_copy(f"exercises/{chapter.id}", "--gates", "--solutions", "--chip=v5e", "--records", str(records),
                          f"--basetemp={tmp_path / 'gate'}")
    assert gate.returncode == 0, gate.stdout[-4000:]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(r["gate"], r["criterion"], r["method"], r["verdict"]) for r in rows] == [
        (chapter.gate, "correct", "off-chip-verified", "pass")]
