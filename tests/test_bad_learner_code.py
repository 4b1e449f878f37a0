"""Whatever the learner's code does, the report is one short message naming it."""

import subprocess
import sys
import textwrap

import pytest
from .support import assert_short_report

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
          "  reproduce (python, at the course root):"]),
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


def test_the_summary_says_each_failure_once_with_its_count(fake_course):
    """The headline of a learner's exception keeps its words and its line; a second test failing
    the same way points at the first instead of repeating the report."""
    fake_course.write("exercises", "double", "def double(x):\n    raise ValueError('learner bug')\n")
    fake_course.test_file(GRADED_TEST.replace("def test_session_goes_on():\n        pass", """def test_double_again(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64),
                            fn=impl.double.double, dtype=np.float32)"""))
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_double_again _*",
        "double() in exercises/ch11/double.py raised ValueError: learner bug (exercises/ch11/double.py:2)",
        "  (the same failure as test_double above)",
        "*FAIL  double             0/2 tests passed",
        "        double() in exercises/ch11/double.py raised ValueError: learner bug "
        "(exercises/ch11/double.py:2)  ?2 tests?",
    ])
    failures = result.stdout.str().split("= FAILURES =")[1].split("= tpucourse =")[0]
    assert failures.count("ValueError: learner bug\n") == 1  # the full report, once
    assert "The same failure in 1 more test of this exercise (other cases): test_double_again." in failures


def test_failures_that_differ_only_in_their_numbers_are_said_once(fake_course):
    """Two cases of one mistake (other shapes, other counts of NaN) are one failure: one report,
    the other test one line pointing at it, one summary line counting both."""
    fake_course.write("exercises", "double", "import jax.numpy as jnp\n\ndef double(x):\n"
                      "    return jnp.where(x > 1, jnp.nan, 2 * x)\n")
    fake_course.test_file("""
        import numpy as np
        import pytest
        from pytest_tpucourse import checks

        @pytest.mark.parametrize("n", [4, 8])
        def test_double(impl, n):
            x = np.arange(n, dtype=np.float32)
            checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64), fn=impl.double.double,
                                dtype=np.float32)
    """)
    result = fake_course.run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "double() in exercises/ch11/double.py: output has 2 NaN of 4 values*",
        "*The same failure in 1 more test of this exercise (other cases): test_double?8?.",
        "*_ test_double?8? _*",
        "double() in exercises/ch11/double.py: output has 6 NaN of 8 values*",
        "  (the same failure as test_double?4? above)",
        "*FAIL  double*",
        "        double() in exercises/ch11/double.py: output has 2 NaN of 4 values*  ?2 tests?",
    ])


def test_the_reproduction_can_be_pasted_into_python(fake_course):
    fake_course.write("exercises", "double", "def double(x):\n    return x * 3\n")
    fake_course.test_file("""
        from pytest_tpucourse import checks, references
        from pytest_tpucourse import strategies as tst

        def test_double(impl):
            x = tst.random_array((8, 16), "bfloat16", 7, kind="large")
            checks.assert_matches_reference(impl.double.double, (x,), require_kernel=False,
                                            reference=references.Reference("2x", lambda x: 2 * x, lambda x: 2 * x))
    """)
    result = fake_course.run()
    lines = result.stdout.lines
    start = lines.index("  reproduce (python, at the course root):")
    pasted = [line.strip() for line in lines[start + 1:start + 3]]
    assert pasted == ["from pytest_tpucourse.prompt import *; x = random_array((8, 16), 'bfloat16', 7, kind='large')",
                      "out = load('exercises/ch11/double.py').double(x)"]
    done = subprocess.run([sys.executable, "-c", "\n".join(pasted + ["print(out.dtype, out.shape)"])],
                          cwd=fake_course.pytester.path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("bfloat16 (8, 16)")


NAN_KERNEL = """
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _reads_scratch_unset(x_ref, o_ref, acc_ref):
        o_ref[...] = acc_ref[...] + 2 * x_ref[...]   # acc_ref is never written

    def double(x):
        return pl.pallas_call(_reads_scratch_unset, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              scratch_shapes=[pltpu.VMEM(x.shape, jnp.float32)])(x)
"""

NAN_TESTS = """
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks

    def test_double(impl):
        x = jnp.ones((8, 128), jnp.float32)
        checks.assert_close(impl.double.double(x), 2 * np.ones((8, 128)), fn=impl.double.double, dtype=np.float32)
"""

def test_nan_from_a_kernel_names_the_memory_it_read_before_anything_wrote_it(fake_course):
    """The call is made again with never-written memory filled with 0 (the NaN goes: a read of it is
    proven), then stepped through: the scratch buffer is named, and no other suspect is listed."""
    fake_course.write("exercises", "double", NAN_KERNEL)
    fake_course.test_file(NAN_TESTS)
    result = fake_course.run()
    result.stdout.fnmatch_lines([
        "double() in exercises/ch11/double.py: output has 1,024 NaN of 1,024 values (the first at [0, 0]: "
        "nan where the reference is 2).",
        "  Memory never written is read: run again with never-written memory filled with 0 instead of NaN*",
        "  Computed again step by step (kernel _reads_scratch_unset), the NaN in output comes from acc_ref "
        "(scratch) before anything writes it.*",
    ])
    failure = result.stdout.str().split("= FAILURES =")[1]
    assert "before its .wait()" not in failure and "row's max" not in failure and "index map" not in failure


def test_nan_without_a_kernel_blames_arithmetic_not_memory(fake_course):
    """Chapter 1 has no kernel and no interpret mode: an overflow is what the message suggests."""
    fake_course.write("exercises", "double", "import jax.numpy as jnp\n\ndef double(x):\n"
                      "    e = jnp.exp(x * 100)\n    return 2 * x * e / e\n")
    fake_course.test_file(NAN_TESTS)
    result = fake_course.run()
    result.stdout.fnmatch_lines([
        "*output has 1,024 NaN of 1,024 values*",
        "  The first Inf is an overflow: exp of 100 at exercises/ch11/double.py:4 (in float32, exp of "
        "anything above 88.72 is inf).*Then inf / inf makes the NaN (div).",
    ])
    assert "interpret mode" not in result.stdout.str().split("= FAILURES =")[1]


ILLEGAL_BLOCK = """
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def _copy(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def double(x, *, block=(8, 64)):
        spec = pl.BlockSpec(block, lambda i, j: (i, j))
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[0] // block[0], x.shape[1] // block[1]),
                              in_specs=[spec], out_specs=spec)(x)
"""


def test_a_refused_block_is_explained_at_its_blockspec(fake_course):
    fake_course.write("exercises", "double", ILLEGAL_BLOCK)
    fake_course.test_file("""
        import jax.numpy as jnp
        from pytest_tpucourse import tpu

        def test_lowers(impl):
            tpu.assert_lowers_for_tpu(impl.double.double, jnp.ones((16, 256), jnp.float32))
    """)
    result = fake_course.run()
    result.stdout.fnmatch_lines([
        "double() in exercises/ch11/double.py would not compile for a TPU: the Mosaic lowering rejects it.",
        "  The BlockSpec at exercises/ch11/double.py:10 cuts input 0 of kernel _copy (a (16, 256) float32 "
        "array) into blocks of (8, 64): dimension -1 of the block is 64: neither a multiple of 128 (lanes) "
        "nor the array's full 256.",
        "  A TPU block's last two dimensions must be multiples of (8, 128), or the array's own dimensions.",
        "  (checked: the lowering for a v5e, float32 inputs, the function's default block sizes)",
    ])
    assert "file a bug" not in result.stdout.str() and "Blocked(" not in result.stdout.str()


FROM_SOLUTIONS = """
    import importlib.util
    import pathlib

    _path = pathlib.Path(__file__).resolve().parents[2] / "solutions" / "ch11" / "double.py"
    _spec = importlib.util.spec_from_file_location("someone_elses", _path)
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
"""


@pytest.mark.parametrize("body, expected", [
    ("double = _module.double",
     "exercises/ch11/double.py (or a module it imports) uses the shipped solution: it * solutions/ch11/double.py."
     " Your exercises are graded on your own code*"),
    ("def double(x):\n    return _module.double(x)",
     "exercises/ch11/double.py (or a module it imports) uses the shipped solution: it * solutions/ch11/double.py."
     " Your exercises are graded on your own code; `tpucourse solution ch11.double`*"),
], ids=["takes-the-function", "calls-the-solution"])
def test_a_solution_loaded_by_path_is_refused(fake_course, body, expected):
    fake_course.write("exercises", "double", textwrap.dedent(FROM_SOLUTIONS) + body + "\n")
    fake_course.test_file(GRADED_TEST)
    result = fake_course.run()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([expected, "*FAIL  double*"])


def test_a_solution_the_graded_tests_load_is_not_the_learners(fake_course):
    """Graded tests may load a shipped solution as a given program (chapter 7 reads chapter 11's
    matmul): that is no learner's code loading it."""
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.test_file(textwrap.dedent(FROM_SOLUTIONS) + "import sys\nsys.modules['someone_elses'] = _module\n"
                          + textwrap.dedent(GRADED_TEST))
    fake_course.run().assert_outcomes(passed=2)


REDUCTION_KERNEL = """
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _row_block_sums(x_ref, o_ref):  # grid axis 1 walks the columns: a reduction
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...]

    def _build(semantics):
        return pl.pallas_call(
            _row_block_sums, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(1, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))
"""

BUILT = {
    "at-import": "_KERNEL = _build({semantics})\n\ndef double(x):\n    return _KERNEL(x)\n",
    "in-the-function": "def double(x):\n    return _build({semantics})(x)\n",
}

REDUCTION_TESTS = """
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks, tpu

    X = jnp.arange(8 * 512, dtype=jnp.float32).reshape(8, 512) / 1000

    def test_values(impl):
        want = np.asarray(X, np.float64).reshape(8, 4, 128).sum(axis=1)
        checks.assert_close(impl.double.double(X), want, fn=impl.double.double, dtype=np.float32)

    def test_races(impl):
        tpu.assert_no_races(impl.double.double, X)

    def test_lowers(impl):
        tpu.assert_lowers_for_tpu(impl.double.double, X)
"""


@pytest.mark.parametrize("built", BUILT)
@pytest.mark.parametrize("semantics, outcomes", [
    ('("parallel", "arbitrary")', dict(passed=3)),
    # the reduction axis split across cores: a race, and wrong values under the shuffled grid order
    ('("parallel", "parallel")', dict(passed=1, failed=2)),
])
def test_a_kernel_built_at_import_is_graded_like_one_built_in_the_function(fake_course, built, semantics,
                                                                            outcomes):
    """pl.pallas_call(...) takes the interpret mode in effect when called, not when built: the race
    check's two cores and the TPU lowering reach a kernel built at module import too."""
    fake_course.write("exercises", "double", REDUCTION_KERNEL + textwrap.indent(
        BUILT[built].format(semantics=semantics), "    "))
    fake_course.test_file(REDUCTION_TESTS)
    result = fake_course.run("-v")
    result.assert_outcomes(**outcomes)
    if "failed" in outcomes:
        result.stdout.fnmatch_lines(["*test_races FAILED*", "*has a data race under TPU interpret mode*"])


RAGGED_OUT_OF_BOUNDS = """
    import jax
    from jax.experimental import pallas as pl

    def _copy(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def double(x):
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 3),
                              in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i + 1, j))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)))(x)
"""


def test_an_out_of_bounds_block_names_the_array_as_passed_and_as_padded(fake_course):
    fake_course.write("exercises", "double", RAGGED_OUT_OF_BOUNDS)
    fake_course.test_file("""
        import numpy as np
        import jax.numpy as jnp
        from pytest_tpucourse import checks

        def test_ragged(impl):
            x = jnp.ones((13, 342), jnp.float32)
            checks.assert_close(impl.double.double(x), 2 * np.ones((13, 342)), fn=impl.double.double,
                                dtype=np.float32)
    """)
    result = fake_course.run()
    result.stdout.fnmatch_lines([
        "*IndexError: Out-of-bounds block index (2, 0) for input \"x_ref\"*input has shape (16, 384).",
        "  x_ref is your (13, 342) array; the interpreter pads it to whole (8, 128) blocks, (16, 384), and "
        "block index (2, 0) lies past even that: check the index map of its BlockSpec at "
        "exercises/ch11/double.py:10.",
    ])
