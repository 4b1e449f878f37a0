"""Every built chapter: stubs are all TODO, solutions all pass, every mutant is caught.

These run the real graded suites in processes of their own, as a learner's run would be.
Each test declares its run (`job_of`); the runs go to a warm worker that runs as many at
a time as the machine has cores (tests/chapter_runs.py), and each test judges its own.
"""

import re

import pytest

from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.run.mutants import build_tree, load_mutants, says_pattern

from pytest_tpucourse.diagnosis import causes

from . import readme_samples
from .chapter_runs import ChapterJob, wait_for
from .support import KERNEL_CHAPTERS, REPO, failed_files, first_failure, noise

# Every test here grades a real chapter in a pytest process of its own: `-m "not chapters"` skips them.
pytestmark = pytest.mark.chapters

COURSE = load_course(REPO)
BUILT = [c for c in COURSE.chapters if c.exercises]
MUTANT_FILES = sorted((REPO / "tests" / "mutants").glob("ch*.toml"))
MUTANTS = [m for path in MUTANT_FILES for m in load_mutants(path)]
EQUIVALENTS = [m for path in MUTANT_FILES for m in load_mutants(path, "equivalents")]
PARALLEL_REDUCTION = next(m for m in MUTANTS if m.name == "matmul_reduction_axis_parallel")
FIRST_SUSPECTS: dict[str, tuple] = {}  # "chNN.name" -> (the mutant's cause, the first suspect its report names)
FIRST_SUSPECT_RATE = 0.9  # of the kernel chapters' mutants, the share whose report names their cause first


@pytest.fixture
def chapter_run(request, chapter_runner):
    """The result of this test's run of a chapter (its job_of), as pytester's RunResult."""
    return wait_for(chapter_runner, request.node, lambda item: chapter_job(item, chapter_runner))


def chapter_job(item, runner) -> ChapterJob | None:
    """The run a test of this module declares (tests/chapter_runs.py hands them in at the start)."""
    return job_of(item, runner.fresh_path("tree"))


def job_of(item, workdir) -> ChapterJob | None:
    """The chapter run a test of this module grades (None for any other test)."""
    name, params = item.originalname, getattr(item, "callspec", None)
    params = params.params if params else {}
    if name == "test_stubs_are_reported_todo":
        return ChapterJob(params["chapter"].id, ("-v",))
    if name == "test_solutions_pass":
        return ChapterJob(params["chapter"].id, ("--solutions",))
    if name == "test_mutant_is_caught_by_exactly_its_tests":
        mutant = params["mutant"]
        tree = build_tree(mutant, REPO / "solutions", workdir)
        # Each file the mutant must fail stops at its first failure: caught once is caught.
        return ChapterJob(mutant.chapter, ("--impl-root", str(tree), *mutant.pytest_args),
                          files=tuple(affected_test_files(mutant.chapter, mutant.module)),
                          stop_files=mutant.caught_by)
    if name == "test_correct_variant_passes":
        variant = params["variant"]
        tree = build_tree(variant, REPO / "solutions", workdir)
        return ChapterJob(variant.chapter, ("--impl-root", str(tree)),
                          files=tuple(affected_test_files(variant.chapter, variant.module)))
    if name == "test_whole_chapter_grading_isolates_the_mutated_kernel":
        tree = build_tree(PARALLEL_REDUCTION, REPO / "solutions", workdir)
        return ChapterJob("ch11", ("--impl-root", str(tree)))
    if name == "test_fast_interpreter_misses_the_reduction_axis_marked_parallel":
        tree = build_tree(PARALLEL_REDUCTION, REPO / "solutions", workdir)
        return ChapterJob("ch11", ("--impl-root", str(tree), "--interpret", "fast",
                                   "-k", "test_matmul_f32 or test_matmul_bf16"))
    return None


@pytest.mark.parametrize("chapter", BUILT, ids=lambda c: c.id)
def test_stubs_are_reported_todo(chapter_run, chapter):
    result = chapter_run
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    # Gate tests are skipped without --gates; every graded test is TODO.
    assert set(outcomes) <= {"todo", "skipped"} and outcomes.get("todo", 0) > 0, outcomes
    result.stdout.fnmatch_lines([
        f"{chapter.label}: 0/{len(chapter.exercises)} exercises",
        f"course: 0/{COURSE.chapters_total} chapters (your progress)",
    ])
    out = result.stdout.str()
    for exercise in chapter.exercises:
        assert f"{exercise.function}() in exercises/{chapter.id}/{exercise.module_file} is not written yet" in out
    assert "Traceback" not in out and "pytest_tpucourse/" not in out
    # What the READMEs show such a run printing, counts included, is what this one printed.
    for where, sample in readme_samples.stub_samples(chapter.id):
        assert readme_samples.unprinted(sample, out) == [], f"{where}'s sample of this run"


@pytest.mark.parametrize("chapter", BUILT, ids=lambda c: c.id)
def test_solutions_pass(chapter_run, chapter):
    result = chapter_run
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    n = len(chapter.exercises)
    result.stdout.fnmatch_lines([f"{chapter.label}: {n}/{n} exercises"])


def affected_test_files(chapter: str, module: str) -> list[str]:
    """The graded test files that can observe a change to one solution module.

    A test file observes a module it calls (`impl.<module>.`) or one that a module it
    calls imports (`from . import <module>`), directly or through other modules. Every
    other file grades code identical to solutions/, which test_solutions_pass already
    shows passing, so a mutant run grades only these: the same verdict as grading the
    whole chapter, several times faster.
    """
    solutions = REPO / "solutions" / chapter
    sources = {path.stem: path.read_text() for path in solutions.glob("*.py")}
    importers, frontier = {module}, [module]
    while frontier:
        imported = frontier.pop()
        for name, text in sources.items():
            if name not in importers and re.search(
                    rf"from \. import .*\b{imported}\b|from \.{imported} import", text):
                importers.add(name)
                frontier.append(name)
    return sorted(
        path.name for path in (REPO / "exercises" / chapter).glob("test_*.py")
        if any(f"impl.{name}." in path.read_text() for name in importers)
    )


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.chapter}.{m.name}")
def test_mutant_is_caught_by_exactly_its_tests(chapter_run, mutant, record_property):
    observers = affected_test_files(mutant.chapter, mutant.module)
    assert set(mutant.caught_by) <= set(observers), f"{mutant.caught_by} never call {mutant.module}"
    result = chapter_run
    caught = failed_files(result)
    record_property("mutant", f"{mutant.chapter}.{mutant.name}")
    record_property("mutant_caught", caught >= set(mutant.caught_by))
    assert caught == set(mutant.caught_by), (
        f"{mutant.name} ({mutant.why}) should fail exactly {mutant.caught_by}, failed {sorted(caught)}"
    )
    output = result.stdout.str()
    if mutant.chapter in KERNEL_CHAPTERS:
        named = causes.first_suspect(first_failure(output))
        record_property("cause", mutant.cause)
        record_property("first_suspect", named)
        FIRST_SUSPECTS[f"{mutant.chapter}.{mutant.name}"] = (mutant.cause, named)
    assert "Traceback" not in output
    # What the chapter README's mistakes table quotes of this mutant is what its run prints.
    unsaid = [quoted for quoted in mutant.says if not says_pattern(quoted).search(output)]
    assert not unsaid, f"{mutant.name}: the README quotes {unsaid}, which its run does not print"
    # Each failure said once, in the course's words (no raw dump, no JAX or hypothesis text of its own).
    assert noise(output) == [], f"{mutant.name}: {noise(output)}"


@pytest.mark.parametrize("variant", EQUIVALENTS, ids=lambda m: f"{m.chapter}.{m.name}")
def test_correct_variant_passes(chapter_run, variant, record_property):
    result = chapter_run
    record_property("equivalent", f"{variant.chapter}.{variant.name}")
    record_property("equivalent_passed", result.ret == pytest.ExitCode.OK)
    assert result.ret == pytest.ExitCode.OK, f"{variant.name} ({variant.why}):\n{result.stdout.str()}"


def test_whole_chapter_grading_isolates_the_mutated_kernel(chapter_run):
    """Kept on one mutant: grading the whole chapter, every file run to its end, fails
    exactly the mutated kernel's tests (the other mutant runs grade only the files that
    can observe the change, and stop a file at its first failure)."""
    assert failed_files(chapter_run) == {"test_matmul.py"}


def test_fast_interpreter_misses_the_reduction_axis_marked_parallel(chapter_run):
    """The reason TPU interpret mode is the default, shown on a shipped mutant: the value
    checks pass under the generic interpreter (only the race check, which always runs
    TPU interpret mode, would still catch it)."""
    fast = chapter_run
    assert fast.ret == pytest.ExitCode.OK, fast.stdout.str()
    assert re.search(r"fast generic interpreter", fast.stdout.str())


@pytest.mark.parametrize("chapters", [KERNEL_CHAPTERS], ids=["-".join(KERNEL_CHAPTERS)])  # -k chNN selects it
def test_the_first_suspect_named_is_the_mistake(request, chapters):
    """Over the kernel chapters' mutants graded above, how often the first cause a mutant's first
    failure report names (diagnosis/causes.py's words) is the cause its mutants file gives it:
    printed per chapter, and at least 9 in 10 overall. Reads the runs the mutant tests made."""
    selected = {f"{item.callspec.params['mutant'].chapter}.{item.callspec.params['mutant'].name}"
                for item in request.session.items if item.originalname == "test_mutant_is_caught_by_exactly_its_tests"
                and item.callspec.params["mutant"].chapter in chapters}
    seen = {key: value for key, value in FIRST_SUSPECTS.items() if key in selected}
    if not seen:
        pytest.skip("no kernel chapter's mutant was graded in this process (select them, without -n)")
    lines = []
    for chapter in sorted({key.split(".")[0] for key in seen}):
        mine = {k: v for k, v in seen.items() if k.startswith(chapter + ".")}
        right = sum(cause == named for cause, named in mine.values())
        lines.append(f"{chapter}: {right}/{len(mine)} first suspects are the mistake")
    right = sum(cause == named for cause, named in seen.values())
    lines.append(f"all: {right}/{len(seen)} ({100 * right / len(seen):.0f}%)")
    lines += [f"  {key}: {cause}, the report names {named} first"
              for key, (cause, named) in sorted(seen.items()) if cause != named]
    print("\n".join(lines))
    if len(seen) >= 10:
        assert right >= FIRST_SUSPECT_RATE * len(seen), "\n".join(lines)
