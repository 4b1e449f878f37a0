"""course.toml, exercises/, solutions/ and tests/mutants/ agree with each other."""

import ast
import dataclasses
import importlib.util
import itertools
import re

import pytest

from pytest_tpucourse.core import profiles
from pytest_tpucourse.core.course import SOLUTIONS, load_course, module_in_tree
from pytest_tpucourse.gates import criteria
from pytest_tpucourse.run.mutants import load_mutants

from .support import REPO, readme_sections

COURSE = load_course(REPO)
EXERCISES = [e for c in COURSE.chapters for e in c.exercises]
BUILT = [c for c in COURSE.chapters if c.exercises]


def test_the_chapters_are_numbered_in_order_and_carry_every_gate_once():
    """Counted from the data: adding a chapter is an entry in course.toml, not a number here."""
    assert [c.id for c in COURSE.chapters] == [f"ch{n:02d}" for n in range(1, len(COURSE.chapters) + 1)]
    assert COURSE.chapters_total == len(COURSE.chapters)
    gates = sorted(c.gate for c in COURSE.chapters if c.gate is not None)
    assert gates == list(criteria.GATE_NUMBERS) and COURSE.gates_total == len(criteria.GATES)
    assert all(c.kind == "stage" for c in COURSE.chapters if c.gate is not None)


@pytest.mark.parametrize("chapter", BUILT, ids=lambda c: c.id)
def test_chapter_readme_carries_its_title(chapter):
    readme = REPO / "exercises" / chapter.id / "README.md"
    first_line = readme.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith("# ") and chapter.title in first_line, first_line


@pytest.mark.parametrize("chapter", BUILT, ids=lambda c: c.id)
def test_chapter_readme_has_the_sections_in_order(chapter):
    """The sections docs/authoring.md section 3 names; "Gate NN" for a stage only, with its gate's number.
    Chapters whose exercises are not kernels say "How your code runs here"."""
    headings = re.findall(r"^## (.+)$", (REPO / "exercises" / chapter.id / "README.md").read_text(encoding="utf-8"),
                          re.M)
    expected = [f"Gate {chapter.gate:02d}" if s == "Gate NN" else s for s in readme_sections()
                if s != "Gate NN" or chapter.gate is not None]
    assert [h.replace("How your code runs here", "How your kernels run here") for h in headings] == expected


@pytest.mark.parametrize("chapter", BUILT, ids=lambda c: c.id)
def test_every_graded_test_file_belongs_to_an_exercise_or_the_gate(chapter):
    for path in (REPO / "exercises" / chapter.id).glob("test_*.py"):
        if path.name.startswith("test_gate"):
            assert chapter.gate is not None and path.name == f"test_gate{chapter.gate:02d}.py", (
                f"{path}: a gate test file is test_gateNN.py, NN the chapter's gate")
            continue
        assert chapter.exercise_for_test_file(path.name), f"{path} grades no exercise of course.toml"


def _public_functions(path):
    """{name: ast.FunctionDef} of a module's top-level functions not starting with _."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.key)
def test_stub_solution_and_tests_exist_with_one_signature(exercise):
    """Every public function of the stub is a TODO with a docstring and the solution's signature
    (those course.toml lists as `given` ship written, to be read or fixed); the solution may add
    helpers (its kernels) that the stub leaves to the learner."""
    stub_path, solution_path = REPO / exercise.module_path, REPO / exercise.solution_path
    assert (REPO / exercise.test_path).is_file()
    stubs, solutions = _public_functions(stub_path), _public_functions(solution_path)
    assert exercise.function in stubs, f"{stub_path} has no top-level function {exercise.function}()"
    for name, stub in stubs.items():
        assert name in solutions, f"{stub_path} defines {name}(), which {solution_path} does not"
        assert ast.dump(stub.args) == ast.dump(solutions[name].args), (
            f"{name}(): stub and solution signatures differ")
        assert ast.get_docstring(stub), f"the stub {exercise.key}.{name} needs a docstring: what to write"
        if name in exercise.given:
            continue
        last = stub.body[-1]
        assert isinstance(last, ast.Raise) and "NotImplementedError" in ast.dump(last), (
            f"the stub {exercise.key}.{name} must end by raising NotImplementedError"
        )
    assert set(exercise.given) <= set(stubs), f"{exercise.key}: given {exercise.given} not all in the stub"
    assert exercise.function not in exercise.given, f"{exercise.key}: its graded function cannot be given"
    assert exercise.hints, f"{exercise.key} has no hints"


@pytest.mark.parametrize("path", sorted((REPO / "tests" / "mutants").glob("ch*.toml")), ids=lambda p: p.stem)
def test_every_mutant_applies_to_its_solution(path):
    chapter = COURSE.chapter(path.stem)
    for mutant in load_mutants(path) + load_mutants(path, "equivalents"):
        solution = REPO / module_in_tree(SOLUTIONS, mutant.chapter, mutant.module)
        assert mutant.apply(solution.read_text(encoding="utf-8")) != solution.read_text(encoding="utf-8")
        for test_file in mutant.caught_by:
            assert chapter.exercise_for_test_file(test_file), f"{mutant.name}: {test_file} grades nothing"


@pytest.mark.parametrize("path", sorted((REPO / "tests" / "mutants").glob("ch*.toml")), ids=lambda p: p.stem)
def test_what_a_mutant_says_is_quoted_in_its_readme_table(path):
    """A mutant's `says` are the README table's quotes of its run (the chapter runs check them against
    the run's output): each is in the chapter's "Common mistakes" section, as written."""
    readme = (REPO / "exercises" / path.stem / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Common mistakes", 1)[-1].split("\n## ", 1)[0]
    for mutant in load_mutants(path):
        for quoted in mutant.says:
            assert quoted in table, f"{mutant.name}: {quoted!r} is not in {path.stem}'s mistakes table"


def _ranks(value) -> tuple[int, ...]:
    """The ranks of the array shapes (tuples of ints) a drawn value holds, at any depth."""
    if isinstance(value, tuple) and value and all(type(v) is int for v in value):
        return (len(value),)
    if isinstance(value, (tuple, list)):
        return tuple(rank for v in value for rank in _ranks(v))
    return ()


def _form(values: dict):
    """What of one configuration the dev profile must draw: the ranks of its shapes, and its
    axis counted from 0 (None for an axis its shape does not have)."""
    ranks = tuple(rank for name, value in sorted(values.items(), key=lambda kv: str(kv[0]))
                  if name != "axis" for rank in _ranks(value))
    axis = values.get("axis")
    if axis is not None and ranks:
        if not -ranks[0] <= axis < ranks[0]:
            return None
        axis %= ranks[0]
    return ranks, axis


def _property_tests():
    """(test file, test function) of every graded property test with explicit examples."""
    for chapter in BUILT:
        for path in sorted((REPO / "exercises" / chapter.id).glob("test_*.py")):
            if "@example" not in path.read_text(encoding="utf-8"):
                continue
            spec = importlib.util.spec_from_file_location(f"graded_{chapter.id}_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for test in vars(module).values():
                if getattr(test, "hypothesis_explicit_examples", None) and hasattr(test, "hypothesis"):
                    yield f"{chapter.id}/{path.name}::{test.__name__}", test


def test_dev_draws_every_rank_and_axis_a_graded_test_lists():
    """The learner's dev profile draws only the configurations a test's explicit examples hold
    (core/profiles.py): every rank of the shapes a `few` draw lists, with every axis it lists,
    must be one of them, so a kernel wrong along one axis of one rank fails in every profile."""
    missing = {}
    for name, test in _property_tests():
        given = test.hypothesis._given_kwargs
        drawn = {arg: getattr(strategy, profiles.OPTIONS_ATTRIBUTE) for arg, strategy in given.items()
                 if hasattr(strategy, profiles.OPTIONS_ATTRIBUTE)}
        # The draws that decide a form: an axis, and shapes of more than one rank.
        deciding = {arg: options for arg, options in drawn.items()
                    if arg == "axis" or len({_ranks(option) for option in options}) > 1}
        if not deciding:
            continue
        forms = {_form(dict(zip(deciding, combination)))
                 for combination in itertools.product(*deciding.values())} - {None}
        examples = {_form({arg: e.kwargs[arg] for arg in deciding if arg in e.kwargs})
                    for e in test.hypothesis_explicit_examples}
        if forms - examples:
            missing[name] = sorted(forms - examples, key=str)
    assert not missing, f"(ranks, axis) that dev never draws, per test: {missing}"


# Chapters whose every drawn option is an explicit example, and whose graded functions' keyword
# arguments their tests all pass. (Kernel chapters may run an option in a test of its own, a race or
# a compile check on the same call, rather than in the property test's examples.)
EVERY_CASE_EXPLICIT = tuple(f"ch{n:02d}" for n in range(1, 16) if n not in (6, 11))
# Chapters 6 and 11 run their cases' first entry at seed 0 in their race tests (values and races in
# one compiled call), not among the property test's examples.


def _facets(option) -> dict:
    """What of a drawn option a case is told apart by: each field of a configuration (its shape, its
    causal flag, its dtype), or the option itself."""
    if dataclasses.is_dataclass(option):
        return {field.name: getattr(option, field.name) for field in dataclasses.fields(option)}
    return {None: option}


def test_every_option_a_graded_test_draws_is_in_an_explicit_example():
    """The dev profile draws only the options a test's explicit examples hold (core/profiles.py): in
    these chapters each option of every `few` draw (each field of a configuration: its shape, its flag,
    its dtype) is in one of them, so what a README lists as tested runs in every profile."""
    missing = {}
    for name, test in _property_tests():
        if name.split("/")[0] not in EVERY_CASE_EXPLICIT:
            continue
        examples = test.hypothesis_explicit_examples
        for arg, strategy in test.hypothesis._given_kwargs.items():
            options = getattr(strategy, profiles.OPTIONS_ATTRIBUTE, None) or ()
            values = [_facets(e.kwargs[arg]) for e in examples if arg in e.kwargs]
            unseen = {f"{arg}{'' if key is None else '.' + key}={value!r}" for option in options
                      for key, value in _facets(option).items()
                      if not any(key in seen and seen[key] == value for seen in values)}
            if unseen:
                missing[name] = sorted(unseen | set(missing.get(name, ())))
    assert not missing, f"options no explicit example holds (so dev never draws them), per test: {missing}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.key)
def test_every_keyword_argument_of_a_graded_function_is_passed_by_its_tests(exercise):
    """An argument the tests never pass is graded only at its default: a function that ignores an
    explicit eps or scale passes. Each parameter with a default, of every function the stub declares,
    is passed by name somewhere in the exercise's test file."""
    solution = ast.parse((REPO / SOLUTIONS / exercise.chapter / exercise.module_file).read_text(encoding="utf-8"))
    stub = ast.parse((REPO / "exercises" / exercise.chapter / exercise.module_file).read_text(encoding="utf-8"))
    graded = {node.name for node in stub.body if isinstance(node, ast.FunctionDef)}  # the stub's functions
    tests = ast.parse((REPO / "exercises" / exercise.chapter / exercise.test_file).read_text(encoding="utf-8"))
    passed = {k.arg for node in ast.walk(tests) if isinstance(node, ast.Call) for k in node.keywords if k.arg}
    unpassed = []
    for function in solution.body:
        if not isinstance(function, ast.FunctionDef) or function.name.startswith("_") or function.name not in graded:
            continue
        arguments = function.args
        with_defaults = arguments.args[len(arguments.args) - len(arguments.defaults):] + [
            a for a, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is not None]
        unpassed += [f"{function.name}({a.arg}=...)" for a in with_defaults if a.arg not in passed]
    assert not unpassed, f"{exercise.test_file} never passes {unpassed}"


def test_a_capstone_manifest_without_cases_is_a_short_failure():
    """capstone.toml with no [[cases]] (or a half-written one) says what is missing, never a KeyError."""
    from pytest_tpucourse.core.outcomes import WrongResult
    from pytest_tpucourse.instruments import capstone

    with pytest.raises(WrongResult, match=r"the manifest lists no corner cases: add \[\[cases\]\] tables"):
        capstone.cases({"capstone": {}})
    with pytest.raises(WrongResult, match=r"cases\[0\] of the manifest cannot be read: missing why, q_len"):
        capstone.cases({"cases": [{"name": "half written"}]})


def test_a_recorded_upstream_link_is_read_from_the_checkout_holding_a_path(tmp_path):
    from pytest_tpucourse.gates import records

    (tmp_path / "course.toml").write_text("")
    (tmp_path / "exercises" / "ch15").mkdir(parents=True)
    near = tmp_path / "exercises" / "ch15" / "WRITEUP.md"
    assert records.recorded_link(5, near) is None
    records.append(tmp_path / records.DEFAULT_PATH,
                   records.link_record("https://github.com/openxla/tokamax/pull/1", gate=5,
                                       criterion="upstream", chapter="ch15"))
    assert records.recorded_link(5, near) == "https://github.com/openxla/tokamax/pull/1"


def test_the_readmes_course_table_counts_course_tomls_exercises():
    """README.md's "The course" table: a row per chapter, its title, kind and gate, and as many
    exercises as course.toml gives it."""
    rows = re.findall(r"^\| (ch\d\d) \| ([^|]+) \| ([^|]+) \| graded: (\d+) exercises?", (REPO / "README.md").read_text(encoding="utf-8"),
                      re.M)
    assert [r[0] for r in rows] == [c.id for c in COURSE.chapters]
    for (chapter_id, title, kind, count), chapter in zip(rows, COURSE.chapters):
        stage = "layer" if chapter.gate is None else f"gate {chapter.gate:02d}"
        assert (title.strip(), stage in kind, int(count)) == (chapter.title, True, len(chapter.exercises)), chapter_id
