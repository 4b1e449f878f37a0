"""Kernel programs compiled before a run asks for them, in a learner's edit loop: a warm process's
run replays the last run's calls on a thread of its own (grading/ahead.py), and between runs a
saved graded file's programs are compiled at once (learner/compiles_on_save.py). What each run
judges is its own: a replay never stands in for another program, a learner's error or hang in a
replayed trace is the call's failure as before, the files a replayed trace opens count in the
unit, and what the learner's code changes while compiled on save ends the warm process."""

import os
import time
from pathlib import Path

import pytest

from pytest_tpucourse.grading import ahead
from pytest_tpucourse.learner import served_runs, state

from .test_served_runs import course, learner_env, log, logged, run_pytest, wait_until, warm  # noqa: F401

KERNEL = """
import jax
from jax.experimental import pallas as pl


def _scaled(x_ref, o_ref):
    o_ref[...] = x_ref[...] * {factor}


def double(x):
    {before}
    return pl.pallas_call(_scaled, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""

KERNEL_TEST = """
import time

import jax.numpy as jnp
import numpy as np
from pytest_tpucourse import checks


def test_double(impl):
    impl.double.double.resolve()  # the function imported: its remembered calls are replayed from here
    time.sleep({wait})
    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    checks.assert_close(impl.double.double(x), 2.0 * np.asarray(x, np.float64), fn=impl.double.double,
                        dtype=np.float32)
"""


def kernel(factor: str = "2", before: str = "pass") -> str:
    return KERNEL.format(factor=factor, before=before)


@pytest.fixture
def warm_runs(fake_course, monkeypatch):
    """In-process runs of the fake course as a warm process's (served_runs.SERVING), each replay's
    compile noted: [the graded function's name, ...]."""
    monkeypatch.setattr(served_runs, "SERVING", True)
    # The test waits for the replay to end before it calls: what the run then does with a program
    # compiled on the other thread is what these tests read (a call that comes first compiles it itself).
    fake_course.test_file(KERNEL_TEST.format(wait=1.0))
    replayed = []
    compile_on_the_replays_thread = ahead.Job.compile

    def noted(job):
        replayed.append(job.call.name)
        return compile_on_the_replays_thread(job)
    monkeypatch.setattr(ahead.Job, "compile", noted)

    def run(*args):
        return fake_course.pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    run.replayed = replayed
    return run


def test_the_next_run_compiles_the_last_runs_programs_on_a_thread_and_judges_its_own(fake_course, warm_runs):
    fake_course.write("exercises", "double", kernel())
    warm_runs().assert_outcomes(passed=1)
    assert warm_runs.replayed == []  # nothing remembered before the first run
    fake_course.write("exercises", "double", kernel(factor="(2.0 + 0.0 * 7)"))  # another program, same values
    warm_runs().assert_outcomes(passed=1)
    assert warm_runs.replayed == ["double"]
    fake_course.write("exercises", "double", kernel(factor="3"))  # wrong: the replay's program is this one
    wrong = warm_runs()
    wrong.assert_outcomes(failed=1)
    assert warm_runs.replayed == ["double", "double"]
    assert "double() in exercises/ch11/double.py" in wrong.stdout.str()



RACE_CHECKED_TEST = KERNEL_TEST.replace("import checks", "import checks, tpu") + """

def test_double_has_no_race(impl):
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    with tpu.checking_races(impl.double.double):
        checks.assert_close(impl.double.double(x), 2.0 * np.asarray(x, np.float64), fn=impl.double.double,
                            dtype=np.float32)
"""


def test_a_call_under_the_race_checks_interpret_mode_is_replayed_under_it(fake_course, warm_runs):
    """The race check's program (two simulated cores, the detector on) is compiled ahead too, under
    its own interpret mode, and kept under its settings: each call finds its own executable."""
    # Imported here first: pytester's in-process runs drop the modules a run imported, and the
    # toolkit guard reads a package module imported anew during a test as the course's code changed.
    import pytest_tpucourse.checking.tpu_rules  # noqa: F401

    fake_course.test_file(RACE_CHECKED_TEST.format(wait=1.0))
    fake_course.write("exercises", "double", kernel())
    warm_runs().assert_outcomes(passed=2)
    fake_course.write("exercises", "double", kernel(factor="(2.0 + 0.0 * 5)"))
    warm_runs().assert_outcomes(passed=2)
    assert warm_runs.replayed == ["double", "double"]  # the plain call's program and the race check's
    fake_course.write("exercises", "double", kernel(factor="3"))
    warm_runs().assert_outcomes(failed=2)
    assert warm_runs.replayed == ["double"] * 4

def test_a_replayed_trace_that_raises_is_the_calls_failure_as_it_would_be_without_it(fake_course, warm_runs):
    fake_course.write("exercises", "double", kernel())
    warm_runs().assert_outcomes(passed=1)
    fake_course.write("exercises", "double", kernel(before="raise ValueError('the blocks do not divide')"))
    result = warm_runs()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "ValueError: the blocks do not divide" in out and "exercises/ch11/double.py" in out, out
    assert "pytest_tpucourse/" not in out, out


def test_a_replayed_trace_past_the_deadline_fails_the_call_within_it(fake_course, warm_runs):
    fake_course.write("exercises", "double", kernel())
    warm_runs("--kernel-timeout", "2").assert_outcomes(passed=1)
    fake_course.write("exercises", "double", kernel(before="import time; time.sleep(6)"))
    result = warm_runs("--kernel-timeout", "2")
    result.assert_outcomes(failed=1)
    assert "did not finish within 2 s" in result.stdout.str(), result.stdout.str()
    assert warm_runs.replayed == []  # the trace never ended within the run: nothing was compiled for it


READS_A_FILE = """
import pathlib

import jax
from jax.experimental import pallas as pl


def double(x):
    factor = float(pathlib.Path(__file__).with_name("factor.txt").read_text()){extra}

    def scaled(x_ref, o_ref):
        o_ref[...] = x_ref[...] * factor
    return pl.pallas_call(scaled, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def test_a_file_a_replayed_trace_reads_counts_in_the_exercises_unit(fake_course, warm_runs):
    """The replay's trace runs on its own thread (unit_files.recording_apart); the call that uses its
    program counts what that trace read, as its own trace would have."""
    (fake_course.pytester.path / "exercises" / "ch11" / "factor.txt").write_text("2\n")
    fake_course.write("exercises", "double", READS_A_FILE.format(extra=""))
    warm_runs().assert_outcomes(passed=1)
    fake_course.write("exercises", "double", READS_A_FILE.format(extra=" + 0.0"))
    warm_runs().assert_outcomes(passed=1)
    assert warm_runs.replayed == ["double"]
    unit = state.read(fake_course.pytester.path)["exercises"]["ch11.double"]["unit"]
    assert "exercises/ch11/factor.txt" in unit, unit


def test_the_calls_a_replay_can_make_again_are_a_graded_modules_with_plain_settings_and_arrays():
    import jax.numpy as jnp

    from pytest_tpucourse.grading.calls import GradedFunction

    x = jnp.ones((8, 128), jnp.float32)
    assert ahead.describe(GradedFunction(lambda a: a, "f"), {}, "call", (x,)) is None  # not a graded module's

    class Graded:
        name = "double"
        replay_source = ("/course/exercises/ch11/double.py", "/course/exercises", "ch11", "double")

    call = ahead.describe(Graded(), {"block": 128, "shape": (8, 128)}, "call", (x,))
    assert call is not None and call.module == "/course/exercises/ch11/double.py"
    again = call.arguments()
    assert [(a.shape, a.dtype, a.sharding) for a in again] == [(x.shape, x.dtype, x.sharding)]
    assert ahead.describe(Graded(), {"mask": x}, "call", (x,)) is None  # an array setting is traced, not kept
    assert ahead.describe(Graded(), {"how": object()}, "call", (x,)) is None  # an object of the run's own
    assert ahead.describe(Graded(), {}, "call", (x, 3)) is None  # not all arrays: the call runs eagerly


# ------------------------------------------------------------------ compiles on save, in a warm process

def test_a_program_compiled_on_save_runs_in_the_next_run_only_where_its_trace_is_the_same(
        fake_course, warm_runs, monkeypatch):
    """The run traces its own import and checks its own trace; where that trace is, in full, the
    program compiled on save from the same source, it runs that executable (compiled.Program.adopt)
    instead of lowering and compiling it again. A wrong kernel saved is still the run's failure."""
    from pytest_tpucourse.grading import compiled
    from pytest_tpucourse.learner.compiles_on_save import compile_saved

    adopted = []
    adopt = compiled.Program.adopt

    def noted(program, *args):
        executable = adopt(program, *args)
        adopted.append(executable is not None)
        return executable
    monkeypatch.setattr(compiled.Program, "adopt", noted)

    def saved(factor):
        fake_course.write("exercises", "double", kernel(factor=factor))
        calls, policy = ahead.last_run()
        assert compile_saved(calls, policy) == 1

    fake_course.write("exercises", "double", kernel())
    warm_runs().assert_outcomes(passed=1)
    adopted.clear()  # nothing was compiled on save before the first run
    saved("(2.0 + 0.0 * 13)")
    warm_runs().assert_outcomes(passed=1)
    assert adopted == [True]
    saved("3")  # wrong: the run adopts the wrong kernel's program, and fails
    wrong = warm_runs()
    wrong.assert_outcomes(failed=1)
    assert "double() in exercises/ch11/double.py" in wrong.stdout.str()
    assert adopted == [True, True]
    saved("(2.0 + 0.0 * 17)")
    fake_course.write("exercises", "double", kernel(factor="(2.0 + 0.0 * 19)"))  # saved again after the compile
    warm_runs().assert_outcomes(passed=1)
    assert adopted[2:] == [False]  # another source: lowered and compiled by the run


def _kernel_programs(root: Path) -> set[str]:
    folder = root / ".tpucourse" / "jax-cache" / "kernel-programs"
    return set(os.listdir(folder)) if folder.is_dir() else set()


def _compiled_on_save(root: Path, known: set[str]) -> set[str]:
    """The kernel programs kept since `known`, once there are any: compiled on save, as no run ran.
    (A look that sees a save begun compiles it, and once more if the file changed meanwhile, which
    finds its program kept: the log's lines are no count of saves, the programs are.)"""
    # Longer than compiles_on_save.LONGEST_SECONDS: a compile that hangs says so in the log.
    deadline = time.monotonic() + 150
    while not (new := _kernel_programs(root) - known):
        assert time.monotonic() < deadline, \
            f"nothing compiled on save (warm process listening: {served_runs.listening(root)}):\n{log(root)}"
        time.sleep(0.1)
    return new


def test_a_saved_kernel_is_compiled_before_the_run_and_the_run_judges_the_saved_code(course):
    root = course.pytester.path
    course.test_file(KERNEL_TEST.format(wait=0))
    course.write("exercises", "double", kernel())
    assert run_pytest(root).returncode == 0  # a process of its own, which leaves the warm one
    warm(root)
    assert run_pytest(root).returncode == 0  # the warm process's first run: its calls are remembered
    assert logged(root, "run 1: ")
    before = _kernel_programs(root)
    course.write("exercises", "double", kernel(factor="(2.0 + 0.0 * 11)"))
    compiled_on_save = _compiled_on_save(root, before)
    assert len(compiled_on_save) == 1 and logged(root, "double.py saved: 1 of the last run's 1 programs compiled")
    result = run_pytest(root)
    assert result.returncode == 0, result.stdout
    assert _kernel_programs(root) == before | compiled_on_save  # the run compiled nothing itself
    course.write("exercises", "double", kernel(factor="3"))
    _compiled_on_save(root, before | compiled_on_save)
    wrong = run_pytest(root)
    assert wrong.returncode == 1 and "1 failed" in wrong.stdout, wrong.stdout
    assert "this process ends" not in log(root), log(root)


def test_learner_code_that_patches_a_library_when_compiled_on_save_ends_the_warm_process(course):
    root = course.pytester.path
    course.test_file(KERNEL_TEST.format(wait=0))
    course.write("exercises", "double", kernel())
    run_pytest(root)
    warm(root)
    assert run_pytest(root).returncode == 0
    course.write("exercises", "double", "import numpy\n\nnumpy.allclose = lambda *a, **k: True\n" + kernel())
    assert logged(root, "after compiling saved files: this process ends: replaced by"), log(root)
    wait_until(lambda: not served_runs.listening(root), "the warm process still listens")
    fresh = run_pytest(root)  # a process of its own: the library as it is
    assert fresh.returncode == 0, fresh.stdout


def test_a_file_saved_while_a_run_ran_is_compiled_once_the_run_has_answered(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from pytest_tpucourse.learner.compiles_on_save import CompilesOnSave

    module = tmp_path / "double.py"
    module.write_text("a")
    monkeypatch.setattr(ahead, "_last_run", ([SimpleNamespace(module=str(module))], None))
    on_save, started = CompilesOnSave(), []
    monkeypatch.setattr(on_save, "_start", lambda: started.append(module.read_text()))
    on_save.after_run()  # the first run: its files watched from now
    on_save.look()
    assert started == []
    module.write_text("bb")
    on_save.look()
    assert started == ["bb"]  # saved: compiled
    on_save.before_run()
    module.write_text("ccc")  # saved while the next run ran (after it imported the file, perhaps)
    on_save.after_run()
    on_save.look()
    assert started == ["bb", "ccc"]
    on_save.after_run()
    on_save.look()
    assert started == ["bb", "ccc"]  # nothing saved since
    module.write_text("")  # an editor's save half done: truncated, not yet written
    on_save.look()
    assert started == ["bb", "ccc"]
    module.write_text("dddd")
    on_save.look()
    assert started == ["bb", "ccc", "dddd"]


def test_a_file_saved_before_its_first_watch_began_but_after_the_run_began_is_compiled(tmp_path, monkeypatch):
    """A warm process's first run: its files are watched only once it has answered, and a client
    gone at once leaves the learner free to save before then. Such a save is still a save."""
    from types import SimpleNamespace

    from pytest_tpucourse.learner.compiles_on_save import CompilesOnSave

    module = tmp_path / "double.py"
    module.write_text("a")
    os.utime(module, ns=(time.time_ns() - 10**9,) * 2)  # written a second before the run
    monkeypatch.setattr(ahead, "_last_run", ([SimpleNamespace(module=str(module))], None))
    on_save, started = CompilesOnSave(), []
    monkeypatch.setattr(on_save, "_start", lambda: started.append(Path(on_save.saved_files.files[0]).read_text()))
    on_save.before_run()
    on_save.after_run()
    on_save.look()
    assert started == []  # as the run imported it
    other = tmp_path / "other.py"
    other.write_text("b")
    monkeypatch.setattr(ahead, "_last_run", ([SimpleNamespace(module=str(other))], None))
    on_save.before_run()
    other.write_text("bb")  # saved after the run began, before the watch of its files began
    on_save.after_run()
    on_save.look()
    assert started == ["bb"]


def test_a_compile_on_save_that_fails_or_a_thread_that_raises_is_said_in_the_warm_process_log(tmp_path, monkeypatch):
    """The warm process's streams are DEVNULL: what fails in it between runs is written to its log."""
    import threading

    from pytest_tpucourse.learner import compiles_on_save, warm_process
    from pytest_tpucourse.learner.compiles_on_save import CompilesOnSave

    def fails(*args):
        raise RuntimeError("compiler gone")
    monkeypatch.setattr(compiles_on_save, "compile_saved", fails)
    lines = []
    on_save = CompilesOnSave(report=lines.append)
    with pytest.raises(RuntimeError):
        on_save._compile([ahead.Call(("/c/exercises/ch11/double.py", "/c", "ch11", "double"), "double", (), "call",
                                     None, (), ())], None)
    assert lines == ["double.py saved: compiling it failed (RuntimeError: compiler gone); "
                     "the next run compiles its programs itself"]
    assert on_save.finished.is_set()

    root = tmp_path / "course"
    root.mkdir()
    monkeypatch.setattr(served_runs, "log_path", lambda course_root: tmp_path / "warm.log")
    try:
        raise ValueError("a bug of the watch")
    except ValueError as error:
        hook = threading.ExceptHookArgs((ValueError, error, error.__traceback__, threading.current_thread()))
    warm_process._log_thread_failure(root, hook)
    written = (tmp_path / "warm.log").read_text()
    assert "MainThread raised ValueError: a bug of the watch" in written and "| ValueError" in written, written
