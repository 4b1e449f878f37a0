"""Whatever the learner's code does, the report is one short message naming it."""

import pytest

GRADED_TEST = """
    import numpy as np
    from pytest_tpucourse import checks

    def test_double(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64),
                            fn=impl.double.double, dtype=np.float32)

    def test_session_goes_on():
        pass
"""


def assert_short_report(result):
    """No traceback through the plugin or JAX in the report."""
    out = result.stdout.str()
    assert "Traceback" not in out, out
    assert "pytest_tpucourse/" not in out, out
    assert "site-packages" not in out, out


def test_stub_is_reported_as_todo_with_file_and_hint(fake_course):
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run("-v")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*test_double.py::test_double TODO*",
        "*test_double.py::test_session_goes_on PASSED*",
        "*chapter 11 Pallas fundamentals: 0/1 exercises",
        "*TODO  double*1/2 tests passed",
        "*double() in exercises/ch11/double.py is not written yet.",
        "*hint: multiply by two",
        "course: 0/15 chapters (your progress)",
        "next: ch11.double: edit exercises/ch11/double.py, then pytest exercises/ch11/test_double.py",
        "*1 passed, 1 todo*",
    ])
    assert_short_report(result)


def test_solutions_pass(fake_course):
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run("--solutions")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*done  double*2/2 tests passed", "course: 1/15 chapters (this tree, from this run)"])


@pytest.mark.parametrize(
    "body, expected",
    [
        ("    raise ValueError('learner bug')",
         ["*double() in exercises/ch11/double.py raised:",
          "*exercises/ch11/double.py:2 in double",
          "*raise ValueError('learner bug')",
          "*ValueError: learner bug"]),
        ("    return x[:3] * 2",
         ["*double() in exercises/ch11/double.py: output has shape (3,), expected (4,).",
          "  reproduce (python, at the course root):",
          "    from pytest_tpucourse.prompt import *",
          "    out = load('exercises/ch11/double.py').double(np.asarray([0.0, 1.0, 2.0, 3.0], 'float32'))"]),
        ("    return (x * 2).astype('float64')",
         ["*output has dtype float64, expected float32.*"]),
        ("    return x * float('nan')",
         ["*output has 4 NaN of 4 values (the first at ?0?: nan where the reference is 0).",
          "  The inputs hold no NaN or Inf.",
          "  From finite inputs, Inf is an overflow*"]),
        ("    return x * 3",
         ["*output is wrong: relative error 5.00e-01 > bound 1.00e-05 (forward base for float32).",
          "*worst element ?3?: got 9, expected 6"]),
        ("    return [x * 2]",
         ["*output should be an array of shape (4,) and dtype float32, got list.*"]),
        ("    import helper_that_does_not_exist",
         ["*ModuleNotFoundError: No module named 'helper_that_does_not_exist'"]),
    ],
    ids=["raises", "wrong-shape", "wrong-dtype", "nan", "wrong-values", "not-an-array", "bad-import"],
)
def test_bad_function_bodies(fake_course, body, expected):
    fake_course.write("exercises", "double", f"def double(x):\n{body}\n")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([*expected, "*FAIL  double*"])
    assert_short_report(result)


def test_module_that_does_not_import(fake_course):
    fake_course.write("exercises", "double", "def double(x)\n    return x\n")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*importing *exercises/ch11/double.py failed:", "*SyntaxError*"])
    assert_short_report(result)


def test_missing_function_and_missing_module(fake_course):
    fake_course.write("exercises", "double", "def triple(x):\n    return 3 * x\n")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run()
    result.stdout.fnmatch_lines(["*exercises/ch11/double.py has no function double()*"])
    (fake_course.pytester.path / "exercises" / "ch11" / "double.py").unlink()
    result = fake_course.run()
    result.stdout.fnmatch_lines(["*exercises/ch11/double.py does not exist*"])
    assert_short_report(result)


def test_not_implemented_from_elsewhere_is_a_failure_not_a_todo(fake_course):
    fake_course.write("exercises", "helper", "def deep():\n    raise NotImplementedError('deep')\n")
    fake_course.write("exercises", "double", "from . import helper\n\ndef double(x):\n    return helper.deep()\n")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run("-v")
    result.stdout.fnmatch_lines(["*test_double FAILED*", "*NotImplementedError: deep"])


OOB_KERNEL = """
    import jax
    from jax.experimental import pallas as pl

    def _copy(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def double(x, shift=1):
        spec_in = pl.BlockSpec((8, 128), lambda i: (i + shift, 0))
        spec_out = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // 8,), in_specs=[spec_in], out_specs=spec_out)(x)
"""

OOB_TESTS = """
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks

    X = jnp.ones((16, 128), jnp.float32)

    def test_out_of_bounds(impl):
        checks.assert_close(impl.double.double(X), 2 * np.ones((16, 128)), fn=impl.double.double, dtype=np.float32)

    def test_next_kernel_still_runs(impl):
        checks.assert_close(impl.double.double(X, shift=0), 2 * np.ones((16, 128)),
                            fn=impl.double.double, dtype=np.float32)
"""


def test_out_of_bounds_block_index_fails_and_the_next_kernel_runs(fake_course):
    fake_course.write("exercises", "double", OOB_KERNEL)
    fake_course.test_file(OOB_TESTS)
    result = fake_course.run("-v")
    result.stdout.fnmatch_lines([
        "*test_out_of_bounds FAILED*",
        "*test_next_kernel_still_runs PASSED*",
        "*double() in exercises/ch11/double.py raised:",
        "*IndexError: Out-of-bounds block index (2, 0) for input \"x_ref\"*",
    ])
    assert_short_report(result)


def test_fast_interpreter_does_not_catch_out_of_bounds(fake_course):
    """Why TPU interpret mode is the default: the generic interpreter clamps the index."""
    fake_course.write("exercises", "double", OOB_KERNEL)
    fake_course.test_file(OOB_TESTS)
    fake_course.run("--interpret", "fast").assert_outcomes(passed=2)


PAIR_TESTS = """
    import numpy as np
    from pytest_tpucourse import checks, references

    PAIR = references.Reference("pair", lambda x: (2 * x, x), lambda x: (2 * x, x))

    def test_pair(impl):
        checks.assert_matches_reference(impl.double.double, (np.arange(4, dtype=np.float32),),
                                        reference=PAIR, names=["doubled", "same"], require_kernel=False)

    def test_session_goes_on():
        pass
"""


def test_wrong_output_pytree(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    return [2 * x, x, x]\n")
    fake_course.test_file(PAIR_TESTS)
    result = fake_course.run()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "double() in exercises/ch11/double.py returned 3 array(s) [float32[4], float32[4], float32[4]] "
        "as list; expected 2 array(s) [float32[4], float32[4]] as tuple (doubled, same).",
        "*FAIL  double*",
    ])
    assert_short_report(result)
