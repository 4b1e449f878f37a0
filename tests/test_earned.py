"""Every "done" earned: the tricks a learner can try to get done without solving, refused,
and the faults that would end a run dishonestly, handled (docs/earned.md).

Each test reproduces one trick or fault on the one-exercise fake course.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest

from pytest_tpucourse.commands import main as cli
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.run import _wrong_output
from pytest_tpucourse.grading import leftovers, toolkit_guard
from pytest_tpucourse.learner import run_markers, shipped, state

# Two graded cases of one exercise: a learner correct on one and not the other must not be done.
TWO_CASES = """
    import numpy as np
    from pytest_tpucourse import checks

    def _check(impl, n):
        x = np.arange(n, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64),
                            fn=impl.double.double, dtype=np.float32)

    def test_four(impl):
        _check(impl, 4)

    def test_eight(impl):
        _check(impl, 8)
"""

# A shipped solution file long enough (MIN_FILE_BYTES) for a copy of its bytes to be told (solution_code.py).
SOLUTION = '''\
"""The reference double(): twice x, in the input's dtype."""
import numpy as np


def double(x):
    x = np.asarray(x)
    doubled = np.multiply(x, 2, dtype=np.float64)
    result = doubled.astype(x.dtype)
    return result
'''

CORRECT = "def double(x):\n    return x * 2\n"
WRONG = "def double(x):\n    return x * 3\n"


def _course(fake_course, learner: str = CORRECT, tests: str = TWO_CASES):
    fake_course.write("exercises", "double", learner)
    fake_course.write("solutions", "double", SOLUTION)
    fake_course.test_file(tests)
    return fake_course


def _entry(fake_course) -> dict:
    return json.loads((fake_course.pytester.path / ".tpucourse" / "state.json").read_text())["exercises"]["ch11.double"]


def _git_commit(path) -> None:
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.email=c@c", "-c", "user.name=c", "commit", "-qm", "c"]):
        subprocess.run(["git", *command], cwd=path, check=True, capture_output=True)


# ---------------------------------------------------------------- 1. skips


def test_a_skip_from_graded_code_is_a_failure_naming_the_function(fake_course):
    _course(fake_course, "import pytest\n\ndef double(x):\n    if x.shape[0] != 4:\n"
                         "        pytest.skip('only four')\n    return x * 2\n")
    result = fake_course.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "double() in exercises/ch11/double.py called pytest.skip() at exercises/ch11/double.py:5 (only four): "
        "graded code cannot skip, fail or xfail its own tests, so the test fails instead.",
        "*FAIL  double*1/2 tests passed",
    ])
    assert _entry(fake_course)["status"] == "failed"


def test_a_course_skip_called_from_graded_code_is_the_graded_codes(fake_course):
    """The course's "no libtpu" skip, called by graded code where the compiler is missing, is no
    skip of the course's: the test fails, naming the function."""
    _course(fake_course, "from pytest_tpucourse.compiler import libtpu\n\ndef double(x):\n"
                         "    if x.shape[0] != 4:\n        libtpu.skip_unless_available()\n    return x * 2\n")
    fake_course.pytester.makeconftest("from pytest_tpucourse.compiler import libtpu\n\n"
                                      "libtpu.available = lambda: False\n")
    result = fake_course.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["double() in exercises/ch11/double.py called pytest.skip()*graded code cannot skip*"])
    assert _entry(fake_course)["status"] == "failed"


def test_a_skip_at_import_is_a_failure(fake_course):
    _course(fake_course, "import pytest\npytest.skip('nothing here', allow_module_level=True)\n")
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["importing exercises/ch11/double.py called pytest.skip()*(nothing here)*"])


def test_a_skip_made_outside_the_course_does_not_finish_a_test(fake_course):
    _course(fake_course)
    fake_course.pytester.path.joinpath("exercises", "ch11", "conftest.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture(autouse=True)
        def _skip_eight(request):
            if request.node.name == "test_eight":
                pytest.skip("not today")
    """))
    result = fake_course.run()
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*part  double*1/2 tests passed*",
                                 "*skipped by exercises/ch11/conftest.py, not by the course*"])
    assert _entry(fake_course)["status"] == "partial"


def test_a_gate_kernel_that_skips_fails_its_output_check():
    def kernel(x):
        pytest.skip("no timing today")

    x = np.ones(4, np.float32)
    assert _wrong_output("kernel", kernel, [(x,)], [x], "float32") == "kernel raised Skipped: no timing today"


def test_a_gate_kernel_that_skips_while_traced_or_timed_is_its_failure(tmp_path):
    """Before anything is timed the gate traces the kernel at its size (own work), then times it:
    a pytest.skip() in either is the kernel's failure (a fail row), never a skipped gate test."""
    from pytest_tpucourse.gates import own_work, timer

    def kernel(*args):
        pytest.skip("no timing today")

    [problem] = own_work.problems(own_work.Work("your matmul", kernel, 1.0), tmp_path)
    assert problem == "your matmul could not be traced at the gate's size: Skipped: no timing today"
    with pytest.raises(timer.ImplementationFailed, match="kernel raised Skipped: no timing today"):
        timer._named("kernel", kernel)()
    with pytest.raises(timer.ImplementationFailed, match="kernel raised Skipped: no timing today"):
        timer._attributed("kernel", kernel)


# ---------------------------------------------------------------- 2. the checker


DISARMED = """
    import numpy as np
    from pytest_tpucourse import checks
    from pytest_tpucourse.gates import run

    checks._assert_close = checks.assert_close = lambda *a, **k: None
    run._wrong_output = lambda *a, **k: None

    def double(x):
        return np.zeros_like(x)
"""


def test_graded_code_cannot_disarm_the_checker(fake_course):
    _course(fake_course, textwrap.dedent(DISARMED))
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*test_four*", "double() in exercises/ch11/double.py: output is wrong*",
                                 "*test_eight*", "double() in exercises/ch11/double.py: output is wrong*",
                                 "*FAIL  double*0/2 tests passed"])


def test_bound_functions_keep_calling_what_the_module_held_at_binding():
    module = types.ModuleType("pytest_tpucourse._bound_example")
    exec("def inner():\n    return 'honest'\n\ndef outer():\n    return inner()\n\n"
         "class Checker:\n    def check(self):\n        return inner()\n", vars(module))
    module.Checker.__module__ = module.__name__
    sys.modules[module.__name__] = module
    try:
        guard = toolkit_guard.ToolkitGuard()
        guard.bind((module.__name__,))
        module.inner = lambda: "disarmed"
        assert module.outer() == "honest" and module.Checker().check() == "honest"
        assert guard.restore_changed() == ["_bound_example.inner"]
        assert module.inner() == "honest" and guard.restore_changed() == []
    finally:
        del sys.modules[module.__name__]


# ---------------------------------------------------------------- 3. the bytes imported


def test_state_records_the_bytes_imported_not_the_file_at_the_end(fake_course):
    learner = ("import pathlib\n\ndef double(x):\n    return x * 2\n\n"
               "pathlib.Path(__file__).write_text('def double(x):\\n    raise NotImplementedError\\n')\n")
    _course(fake_course, learner)
    result = fake_course.run()
    result.assert_outcomes(passed=2)
    entry = _entry(fake_course)
    assert entry["module_sha256"] == hashlib.sha256(learner.encode()).hexdigest()
    result.stdout.fnmatch_lines(["chapter 11 Pallas fundamentals: 0/1 exercises", "course: 0/15 chapters*"])


# ---------------------------------------------------------------- 4. the shipped solution


LOADED = """
    import importlib.util
    import pathlib

    _path = pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py"
    _spec = importlib.util.spec_from_file_location("anything", _path)
    _loaded = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_loaded)
    _IMPL = [_loaded.double]
    del _loaded, _spec

    def double(x):
        return _IMPL[0](x)
"""
EXECUTED = """
    import pathlib

    _source = (pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py").read_text()
    exec(compile(_source, __file__, "exec"))
"""
RUN_BY_RUNPY = """
    import pathlib
    import runpy

    double = runpy.run_path(str(pathlib.Path(__file__).resolve().parents[2] / "solutions/ch11/double.py"))["double"]
"""
# Read, renamed and executed under the learner's file name: no code of solutions/ runs as such.
REWRITTEN = """
    import pathlib

    _source = (pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py").read_text()
    exec(compile(_source.replace("doubled", "twice"), __file__, "exec"))
"""
# Nothing at import: the solution is read by the call itself, on every call.
READ_IN_THE_CALL = """
    import pathlib

    def double(x):
        namespace = {}
        exec((pathlib.Path(__file__).resolve().parents[2] / "solutions/ch11/double.py").read_text(), namespace)
        return namespace["double"](x)
"""
# The solution moved out of solutions/ into the tree, beside the learner's module.
MOVED_INTO_THE_TREE = "from .kept.double import double\n"
# The course's own way for a chapter to read another chapter's solution, used by the learner.
THROUGH_PUBLIC_KERNELS = """
    from pytest_tpucourse import public_kernels

    double = public_kernels.course_solution(__file__, "ch11.double.double")
"""


# Read by another process (no open() of this one's to audit), executed under the learner's file name one line
# lower, or renamed: code that claims the learner's file and is not its compilation.
_READ_ELSEWHERE = """
    import pathlib
    import subprocess

    _path = pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py"
    _source = subprocess.run(["cat", str(_path)], capture_output=True, text=True, check=True).stdout
"""
SHIFTED_BY_ANOTHER_PROCESS = _READ_ELSEWHERE + """
    exec(compile("\\n" + _source, __file__, "exec"))
"""
RENAMED_BY_ANOTHER_PROCESS = _READ_ELSEWHERE + """
    exec(compile(_source.replace("def double(", "def _twice("), __file__, "exec"))
    double = _twice
"""
# Executed under no file's name, renamed and a line lower, behind a function of the learner's own.
RENAMED_WITHOUT_A_FILE = _READ_ELSEWHERE + """
    _namespace = {}
    exec(compile("\\n" + _source.replace("def double(", "def _twice("), "<kept>", "exec"), _namespace)

    def double(x):
        return _namespace["_twice"](x)
"""
# The read audit's re-entry flag set first, where it had one: the read is recorded all the same.
MUTED_HOOK = """
    import pathlib

    from pytest_tpucourse.grading import solution_reads

    _flag = getattr(solution_reads, "_inside_hook", None)
    if _flag is not None:
        _flag.busy = True
    _text = (pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py").read_text()

    def double(x):
        return x * 2
"""


# Nothing at import: the first call loads the solution and keeps it for the calls after it.
WIRED_IN_BY_ITS_FIRST_CALL = """
    _IMPL = []

    def double(x):
        if not _IMPL:
            from pytest_tpucourse import public_kernels
            _IMPL.append(public_kernels.course_solution(__file__, "ch11.double.double"))
        return _IMPL[0](x)
"""


@pytest.mark.parametrize("arrives, how", [
    ("wired-in-by-its-first-call", "reads solutions/ch11/double.py (at exercises/ch11/double.py:7)"),
    ("kept-in-a-list", "runs double() of solutions/ch11/double.py"),
    ("executed", "runs the code of double() in solutions/ch11/double.py"),
    ("runpy", "runs double() of solutions/ch11/double.py"),
    ("course_solution", "runs double() of solutions/ch11/double.py"),
    ("rewritten-then-executed", "reads solutions/ch11/double.py (at exercises/ch11/double.py:4)"),
    ("read-in-the-call", "reads solutions/ch11/double.py (at exercises/ch11/double.py:6)"),
    ("moved-into-the-tree", "runs double() of exercises/ch11/kept/double.py, a copy of solutions/ch11/double.py "
                            "(as committed)"),
    ("shifted-by-another-process", "runs the code of double() in solutions/ch11/double.py"),
    ("renamed-by-another-process", "runs the code of double() in solutions/ch11/double.py"),
    ("renamed-without-a-file", "runs the code of double() in solutions/ch11/double.py"),
    ("with-the-read-audit-muted", "reads solutions/ch11/double.py (at exercises/ch11/double.py:9)"),
    ("hardlink", "is a copy of solutions/ch11/double.py"),
    ("copy", "is a copy of solutions/ch11/double.py"),
    ("symlink", "is a link to solutions/ch11/double.py"),
])
def test_the_shipped_solution_is_recognised_however_it_arrives(fake_course, arrives, how):
    """Recognised by where the code comes from: solutions/ (loaded, run, read), its source
    compiled under another name, its bytes (in the checkout or as committed), a link."""
    _course(fake_course)
    learner = fake_course.pytester.path / "exercises" / "ch11" / "double.py"
    solution = fake_course.pytester.path / "solutions" / "ch11" / "double.py"
    sources = {"kept-in-a-list": LOADED, "executed": EXECUTED, "runpy": RUN_BY_RUNPY,
               "rewritten-then-executed": REWRITTEN, "read-in-the-call": READ_IN_THE_CALL,
               "moved-into-the-tree": MOVED_INTO_THE_TREE, "course_solution": THROUGH_PUBLIC_KERNELS,
               "wired-in-by-its-first-call": WIRED_IN_BY_ITS_FIRST_CALL,
               "shifted-by-another-process": SHIFTED_BY_ANOTHER_PROCESS,
               "renamed-by-another-process": RENAMED_BY_ANOTHER_PROCESS,
               "renamed-without-a-file": RENAMED_WITHOUT_A_FILE, "with-the-read-audit-muted": MUTED_HOOK}
    if arrives == "moved-into-the-tree":
        _git_commit(fake_course.pytester.path)
        (learner.parent / "kept").mkdir()
        solution.rename(learner.parent / "kept" / "double.py")
    if arrives in sources:
        learner.write_text(textwrap.dedent(sources[arrives]))
    else:
        learner.unlink()
        {"hardlink": lambda: os.link(solution, learner), "copy": lambda: learner.write_bytes(solution.read_bytes()),
         "symlink": lambda: learner.symlink_to(solution)}[arrives]()
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"exercises/ch11/double.py (or a module it imports) uses the shipped solution: it "
                                 f"{how}. Your exercises are graded on your own code*", "*FAIL  double*"])
    assert "must be written in solutions/" not in result.stdout.str()


def test_code_compiled_from_other_text_under_the_learners_file_name_is_refused(fake_course):
    """Whatever its text (here none of the solutions'), code that claims the learner's file and is not
    that file's compilation is not the learner's file's code: refused, saying so."""
    _course(fake_course, textwrap.dedent("""
        exec(compile("def double(x):\\n    return x * 2\\n", __file__, "exec"))
    """))
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["exercises/ch11/double.py (or a module it imports) runs code that is not compiled "
                                 "from its own file: double() claims exercises/ch11/double.py, line 1, but that "
                                 "file does not compile to it*", "*FAIL  double*"])


def test_a_helper_saved_during_the_run_is_still_the_learners_own(fake_course):
    """A module of the tree is judged by the bytes this run imported it from: saving it again
    mid-run (an editor's autosave) leaves its code the learner's."""
    fake_course.write("exercises", "helper", "def twice(x):\n    return x * 2\n")
    _course(fake_course, textwrap.dedent("""
        import pathlib

        from . import helper

        def double(x):
            pathlib.Path(helper.__file__).write_text("\\n\\ndef twice(x):\\n    return x + x\\n")
            return helper.twice(x)
    """))
    result = fake_course.run()
    result.assert_outcomes(passed=2)
    assert "compiled from its own file" not in result.stdout.str()


def test_a_test_walks_each_graded_function_once(fake_course, monkeypatch):
    """The walk that finds the shipped solutions in what a function holds follows thousands of
    objects: once per test and function, however often the test calls it (each test of TWO_CASES
    resolves double() twice); what the tree reads is asked at every call (the cases above)."""
    from pytest_tpucourse.grading import calls

    walked = []
    walk = calls.shipped_solution_in
    monkeypatch.setattr(calls, "shipped_solution_in", lambda *args: walked.append(args[0]) or walk(*args))
    _course(fake_course)
    fake_course.pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    assert len(walked) == 2


def test_a_course_run_inside_this_one_leaves_this_runs_interpret_mode_as_it_was(fake_course):
    """A run in this process (pytester in-process) selects its backend and undoes it when it ends:
    it puts back the interpret mode this run set, so the tests after it still run kernels that way."""
    from pytest_tpucourse.core import jax_internals

    ours = jax_internals.global_interpret_mode()
    assert ours is not None, "this run sets an interpret mode on a CPU (else nothing is read here)"
    _course(fake_course)
    fake_course.pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    assert jax_internals.global_interpret_mode() == ours
    assert getattr(__import__("jax._src.pallas.pallas_call", fromlist=["_pallas_call"])._pallas_call,
                   "tpucourse_original", None) is not None, "pallas_call still reads the mode when called"


def _function_of(path, name):
    """`name` from the file at `path`, compiled under the file's own name (its frames name it)."""
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def test_a_solution_read_through_a_helper_is_read_by_every_tree_module_on_the_stack(tmp_path):
    """The audit hook charges a read of solutions/ to every file of the graded tree with a frame
    on the stack (the innermost first), and to none of the course's test files."""
    from pytest_tpucourse.grading import context, solution_reads

    tree, solutions = tmp_path / "exercises" / "ch11", tmp_path / "solutions" / "ch11"
    for folder in (tree, solutions):
        folder.mkdir(parents=True)
    solution = solutions / "double.py"
    solution.write_text(SOLUTION)
    (tree / "helper.py").write_text("def read(path):\n    return open(path).read()\n")
    (tree / "double.py").write_text("def double(read, path):\n    return read(path)\n")
    (tree / "test_double.py").write_text("def load(path):\n    return open(path).read()\n")
    run = context.GradingContext(solution_reads=solution_reads.watch(tree.parent, solutions.parent))
    context.activate(run)
    try:
        _function_of(tree / "double.py", "double")(_function_of(tree / "helper.py", "read"), str(solution))
        _function_of(tree / "test_double.py", "load")(str(solution))
        open(solution).close()  # no frame of the tree: nobody's read
    finally:
        context.deactivate(run)
    reads = run.solution_reads
    assert set(reads.by_reader) == {os.path.realpath(tree / "helper.py"), os.path.realpath(tree / "double.py")}
    both = {os.path.realpath(tree / name) for name in ("helper.py", "double.py")}
    assert reads.read_by(both) == (solution, tree.resolve() / "helper.py", 2)
    assert reads.read_by({os.path.realpath(tree / "double.py")}) == (solution, tree.resolve() / "double.py", 2)


# The learner's own file: the solution's function, its names and its code, written again.
WRITTEN_LIKE_THE_SOLUTION = '''\
"""My double(): I wrote it the way the reference does."""
import numpy as np


def double(x):
    x = np.asarray(x)
    doubled = np.multiply(x, 2, dtype=np.float64)
    result = doubled.astype(x.dtype)
    return result
'''


def test_code_written_like_the_solution_is_the_learners_own(fake_course):
    """Compiled from the learner's own file, code that compiles to exactly the solution's
    (names, constants, bytecode) is theirs: resemblance is never taken for copying."""
    _course(fake_course, WRITTEN_LIKE_THE_SOLUTION)
    result = fake_course.run()
    result.assert_outcomes(passed=2)
    assert "shipped solution" not in result.stdout.str()
    assert _entry(fake_course)["status"] == "done"


# ---------------------------------------------------------------- 5. the graded tests as shipped


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_only_the_course_graded_tests_count(fake_course, xdist):
    """Under pytest-xdist the workers collect the test files and hand their hashes to the controller."""
    _course(fake_course, WRONG)
    shipped.write(fake_course.pytester.path)  # the course's record of its shipped test files
    fake_course.test_file("def test_four(impl):\n    pass\n\ndef test_eight(impl):\n    pass\n")
    result = fake_course.run(*xdist)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*void  double*2/2 tests passed, not counted: exercises/ch11/test_double.py "
                                 "differs from the course's as shipped (shipped.json)*", "course: 0/15 chapters*"])
    entry = _entry(fake_course)
    assert entry["status"] == "not counted" and entry["tests_shipped"] is False
    fake_course.test_file(TWO_CASES)
    fake_course.write("exercises", "double", CORRECT)
    fake_course.run(*xdist).assert_outcomes(passed=2)
    entry = _entry(fake_course)
    assert entry["status"] == "done" and entry["tests_shipped"] is True


# ---------------------------------------------------------------- 6. plugins that rewrite reports


FLIP = """
    import pytest

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item, call):
        report = yield
        report.outcome = "passed"
        report.longrepr = None
        return report
"""


@pytest.mark.parametrize("arrives", ["PYTEST_PLUGINS", "-p", "conftest"])
def test_a_plugin_that_flips_reports_counts_nothing(fake_course, tmp_path, monkeypatch, arrives):
    _course(fake_course, WRONG)
    args = []
    if arrives == "conftest":
        fake_course.pytester.path.joinpath("conftest.py").write_text(textwrap.dedent(FLIP))
    else:
        (tmp_path / "flip.py").write_text(textwrap.dedent(FLIP))  # outside the checkout
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
        if arrives == "PYTEST_PLUGINS":
            monkeypatch.setenv("PYTEST_PLUGINS", "flip")
        else:
            args = ["-p", "flip"]
    result = fake_course.run(*args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "tpucourse: this run counts nothing as done: plugins outside pytest's and the course's hook how tests "
        "are collected, run or reported (*conftest.py: pytest_runtest_makereport*" if arrives == "conftest" else
        "tpucourse: this run counts nothing as done: plugins outside pytest's and the course's hook how tests "
        "are collected, run or reported (*flip.py: pytest_runtest_makereport*",
        "*reported as passed, but the course saw its test raised WrongResult: a plugin changed the report*",
        "course: 0/15 chapters*",
    ])
    assert _entry(fake_course)["status"] != "done"


DROP_THE_FAILING_TEST = """
    def pytest_collection_modifyitems(items):
        items[:] = [item for item in items if item.name != "test_eight"]
"""

SOLUTION_AS_IMPL = """
    import importlib.util
    import pytest

    @pytest.fixture(scope="module")
    def impl():
        spec = importlib.util.spec_from_file_location("solved", "solutions/ch11/double.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        class Tree:
            double = module
        return Tree
"""


@pytest.mark.parametrize("conftest, which", [(DROP_THE_FAILING_TEST, "pytest_collection_modifyitems"),
                                             (SOLUTION_AS_IMPL, "fixture impl")], ids=["drops-a-test", "own-impl"])
def test_a_conftest_that_chooses_the_tests_or_the_tree_counts_nothing(fake_course, conftest, which):
    """A conftest that drops the failing test at collection, or gives the graded tests another
    `impl` (the shipped solution), grades something else than the learner's tree."""
    _course(fake_course, "def double(x):\n    return x * 2 if x.shape[0] == 4 else x\n")
    fake_course.pytester.path.joinpath("exercises", "ch11", "conftest.py").write_text(textwrap.dedent(conftest))
    result = fake_course.run()
    result.stdout.fnmatch_lines([f"tpucourse: this run counts nothing as done: *conftest.py: {which}*"])
    assert _entry(fake_course)["status"] != "done"


# ---------------------------------------------------------------- 7. a state file written by hand


def test_a_hand_written_state_entry_is_not_from_a_run(fake_course, monkeypatch, capsys):
    _course(fake_course)
    root = fake_course.pytester.path
    fake_course.run().assert_outcomes(passed=2)
    monkeypatch.chdir(root)
    cli.main(["progress"])
    assert "      done  double" in capsys.readouterr().out
    path = root / ".tpucourse" / "state.json"
    data = json.loads(path.read_text())
    data["exercises"]["ch11.double"]["tests_total"] = 3
    path.write_text(json.dumps(data))
    cli.main(["progress"])
    assert "void  double: not from a run (it was changed after its run wrote it)" in capsys.readouterr().out
    digest = hashlib.sha256((root / "exercises" / "ch11" / "double.py").read_bytes()).hexdigest()
    path.write_text(json.dumps({"version": 1, "exercises": {"ch11.double": {
        "status": "done", "tree": "exercises", "tests_passed": 2, "tests_failed": 0, "tests_total": 2,
        "message": "", "module_sha256": digest, "date": "2026-12-01T00:00:00+00:00"}}}))
    cli.main(["progress"])
    out = capsys.readouterr().out
    assert "void  double: not from a run (no run of its tests wrote it): run its tests again" in out
    assert "your progress: 0/15 chapters" in out


# ---------------------------------------------------------------- 8, 9, 12. how a run ends


def test_a_thread_left_running_by_graded_code_does_not_keep_the_run_alive(fake_course):
    _course(fake_course, "import threading\n\ndef _forever():\n    threading.Event().wait()\n\n"
                         "threading.Thread(target=_forever).start()\n\n" + CORRECT)
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    assert result.ret == 0
    result.stderr.fnmatch_lines(["tpucourse: exercises/ch11/double.py:4 in _forever() (thread '*') is still "
                                 "running: the run ends here, its results already written"])
    assert _entry(fake_course)["status"] == "done"


def test_a_run_that_ends_without_its_summary_is_said_so(fake_course, monkeypatch, capsys):
    _course(fake_course, "import os\nos._exit(0)\n")
    result = fake_course.run()
    assert result.ret == 0 and "tpucourse" not in result.stdout.str().split("collected")[-1]
    root = fake_course.pytester.path
    [unfinished] = run_markers.ended_without_summary(root)
    assert unfinished.test_files == ("exercises/ch11/test_double.py",)
    assert not run_markers.reached_summary(root, unfinished.run)
    monkeypatch.chdir(root)
    cli.main(["progress"])
    assert ("WARNING: the run of exercises/ch11/test_double.py started" in capsys.readouterr().out)
    fake_course.write("exercises", "double", CORRECT)
    result = fake_course.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["tpucourse: WARNING the run of exercises/ch11/test_double.py started * (pid *) "
                                 "ended without its summary: graded code called os._exit(), or the process was "
                                 "killed; nothing of it was recorded"])
    assert run_markers.ended_without_summary(root) == [] and run_markers.reached_summary(root, unfinished.run)


def test_a_run_stopped_before_its_collection_ended_is_said_until_the_same_command_ends(tmp_path):
    """A marker naming no test file (the run was killed while collecting, or collected no graded
    file) is cleared by the same command run to its summary, and only by it."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = run_markers.start(tmp_path, "killed", ["tests", "-q"], "exercises")
    killed.write_text(killed.read_text().replace(f'"pid": {os.getpid()}', f'"pid": {dead.pid}'))
    other = run_markers.start(tmp_path, "other", ["exercises/ch11"], "exercises")
    run_markers.summary_written(tmp_path, other)
    assert [run.run for run in run_markers.ended_without_summary(tmp_path)] == ["killed"]
    again = run_markers.start(tmp_path, "again", ["tests", "-q"], "exercises")
    run_markers.summary_written(tmp_path, again)
    assert run_markers.ended_without_summary(tmp_path) == []


def test_a_fork_at_import_leaves_no_pytest_behind(fake_course):
    _course(fake_course, "import os, pathlib\n\nif os.fork() == 0:\n"
                         "    pathlib.Path(__file__).with_name('child.pid').write_text(str(os.getpid()))\n\n"
                         + CORRECT)
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=2)
    pid_file = fake_course.pytester.path / "exercises" / "ch11" / "child.pid"
    end = time.monotonic() + leftovers.FORK_GRACE_SECONDS + 30
    while not pid_file.exists() and time.monotonic() < end:
        time.sleep(0.2)
    child = int(pid_file.read_text())
    while time.monotonic() < end:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.kill(child, 9)
    pytest.fail(f"the forked pytest {child} was still running")


# ---------------------------------------------------------------- 10, 12. state and records files


@pytest.mark.parametrize("make, said", [
    (lambda path: path.write_bytes(bytes(range(256)) * 4), "is not UTF-8 text"),
    (lambda path: path.mkdir(), "is a directory, not a file"),
    (lambda path: path.symlink_to("/dev/zero"), "is not a regular file"),
])
def test_a_broken_state_file_is_named_and_read_with_a_limit(tmp_path, make, said):
    (tmp_path / ".tpucourse").mkdir()
    make(tmp_path / ".tpucourse" / "state.json")
    with pytest.raises(state.CorruptState, match=f"{tmp_path}/.tpucourse/state.json {said}.*delete it"):
        state.read(tmp_path)
    if "UTF" not in said:  # a records file in its place: one bad line with the path, nothing loaded
        [bad] = rec.read(tmp_path / ".tpucourse" / "state.json").bad
        assert str(bad).startswith(f"{tmp_path}/.tpucourse/state.json:0: {said}")


def test_a_run_goes_on_when_the_state_file_is_a_directory(fake_course):
    _course(fake_course)
    (fake_course.pytester.path / ".tpucourse" / "state.json").mkdir(parents=True)
    (fake_course.pytester.path / ".tpucourse" / "records.jsonl").symlink_to("/dev/zero")
    result = fake_course.run()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*progress not saved: */.tpucourse/state.json is a directory, not a file*",
                                 "gate records: *records.jsonl:0: is not a regular file*",
                                 "*done  double*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    (tmp_path / ".tpucourse").mkdir()
    left = tmp_path / ".tpucourse" / ".state.json.abc123.tmp"
    left.write_text("{half")
    state.update(tmp_path, lambda data: None)
    assert not left.exists() and state.read(tmp_path)["version"] == state.VERSION


# ---------------------------------------------------------------- 11. a backend the machine lacks


def test_jax_platforms_naming_a_missing_backend_is_a_usage_error(fake_course, monkeypatch):
    _course(fake_course)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    result = fake_course.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*JAX could not start its backend*check JAX_PLATFORMS=cuda*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
