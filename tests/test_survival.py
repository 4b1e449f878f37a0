"""Kernels that hang or over-ask: each ends as one short failure within the deadline, and the run goes on.

Every case runs in its own pytest subprocess with a hard timeout, so a grader
that failed to survive could never hang this suite.
"""

import subprocess
import time

import pytest

from .support import assert_short_report, pytest_child

KERNELS = """
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _ok(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def _semaphore_never_signalled(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] * 2

    def _dma_waited_but_never_started(x_hbm, o_ref, buf, sem):
        copy = pltpu.make_async_copy(x_hbm, buf, sem)
        copy.wait()
        o_ref[...] = buf[...] * 2

    def _endless_pl_loop(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @pl.loop(0, 2**31 - 1)
        def _(i):
            o_ref[...] = o_ref[...] * 1.0

    def _endless_while_loop_over_a_ref(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

        def body(c):
            o_ref[0, 0] = o_ref[0, 0] + 0.0
            return c
        lax.while_loop(lambda c: c >= 0, body, jnp.int32(0))

    def _endless_scalar_while_loop(x_ref, o_ref):
        n = lax.while_loop(lambda c: c >= 0, lambda c: jnp.maximum(c + 1, 0), jnp.int32(0))
        o_ref[...] = x_ref[...] * 2 + n.astype(jnp.float32)

    def _huge_scratch(x_ref, o_ref, scratch):
        o_ref[...] = x_ref[...] * 2

    SPECS = {
        "ok": (_ok, [], None),
        "semaphore": (_semaphore_never_signalled, [pltpu.SemaphoreType.REGULAR], None),
        "dma": (_dma_waited_but_never_started,
                [pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA], pl.ANY),
        "pl_loop": (_endless_pl_loop, [], None),
        "while_ref": (_endless_while_loop_over_a_ref, [], None),
        "while_scalar": (_endless_scalar_while_loop, [], None),
        "huge_scratch": (_huge_scratch, [pltpu.VMEM((100_000, 100_000, 128), jnp.float32)], None),
    }

    def double(x, case="ok"):
        if case == "python_loop":
            while True:
                pass
        kernel, scratch, space = SPECS[case]
        specs = {"in_specs": [pl.BlockSpec(memory_space=space)]} if space is not None else {}
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              scratch_shapes=scratch, **specs)(x)

    def ok(x):
        # another graded function: a hang of double() does not stop it from running
        return double(x)
"""

TESTS = """
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks

    X = jnp.ones((8, 128), jnp.float32)

    def test_bad_kernel(impl):
        checks.assert_close(impl.double.double(X, case="{case}"), 2 * np.ones((8, 128)),
                            fn=impl.double.double, dtype=np.float32)

    def test_next_kernel_still_runs(impl):
        checks.assert_close(impl.double.ok(X), 2 * np.ones((8, 128)), fn=impl.double.ok, dtype=np.float32)
"""

DEADLINE = 3
STOPPED = "*It was stopped; the other tests still run, and this function's other tests fail at once*"
TIMED_OUT = (f"double() in exercises/ch11/double.py did not finish within {DEADLINE} s (--kernel-timeout; compiling*"
             f"a computation that runs longer than {DEADLINE} s.")
# A wait nothing can ever satisfy (every simulated device blocked on it) is stopped as a
# deadlock as soon as it is seen, before the deadline.
DEADLOCKED = "double() in exercises/ch11/double.py deadlocked: every simulated device waits on a semaphore*"


@pytest.mark.parametrize("case, first_line, expected", [
    ("semaphore", DEADLOCKED, "*device 0: waits on a semaphore for 1 (it holds 0)"),
    ("dma", DEADLOCKED, "*device 0: waits on a DMA semaphore for 4096 bytes (it holds 0) at *double.py:*"),
    ("pl_loop", TIMED_OUT, STOPPED),
    ("while_ref", TIMED_OUT, STOPPED),
    ("python_loop", TIMED_OUT, STOPPED),
    ("while_scalar", TIMED_OUT, "*It is a compiled loop that cannot be interrupted: it keeps one CPU core busy*"),
])
def test_a_hung_kernel_fails_within_the_deadline_and_the_run_goes_on(fake_course, case, first_line, expected):
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(TESTS.replace("{case}", case))
    start = time.monotonic()
    result = fake_course.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--kernel-timeout", str(DEADLINE), timeout=120)
    elapsed = time.monotonic() - start
    result.stdout.fnmatch_lines([
        "*test_bad_kernel FAILED*",
        "*test_next_kernel_still_runs PASSED*",
        first_line,
        expected,
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert_short_report(result)
    assert elapsed < 60, f"{case}: the run took {elapsed:.0f} s"


def test_a_huge_scratch_request_fails_before_anything_is_allocated(fake_course):
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(TESTS.replace("{case}", "huge_scratch"))
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=120)
    result.stdout.fnmatch_lines([
        "*test_bad_kernel FAILED*",
        "*test_next_kernel_still_runs PASSED*",
        "double() in exercises/ch11/double.py asks for 4.7 TiB of VMEM scratch; a v5e TensorCore "
        "has 128 MiB *nothing was run.",
    ])
    assert_short_report(result)


def test_the_vmem_budget_follows_the_chip(fake_course):
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(TESTS.replace("{case}", "huge_scratch"))
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", "--chip", "v7x", timeout=120)
    result.stdout.fnmatch_lines(["*asks for 4.7 TiB of VMEM scratch; a v7x TensorCore has 64 MiB*"])


def test_a_negative_kernel_timeout_is_a_usage_error(fake_course):
    fake_course.test_file(TESTS.replace("{case}", "ok"))
    result = fake_course.run("--kernel-timeout", "-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kernel-timeout: a deadline must be positive (or 0 for none), got -1*"])


def test_the_callers_jax_context_reaches_the_graded_call():
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from pytest_tpucourse.core import jax_internals
    from pytest_tpucourse.grading.deadline import Deadline

    def probe():
        return jax_internals.interpret_mode_in_effect(), jax.config.jax_enable_x64

    params = pltpu.InterpretParams(detect_races=True)
    deadline = Deadline(30)
    with pltpu.force_tpu_interpret_mode(params), jax.enable_x64(True):
        inside = deadline.call(probe)
    assert inside[0] is params and inside[1] is True
    assert deadline.call(probe) == probe()  # outside the contexts: the session's own settings
    with pytest.raises(ZeroDivisionError):
        deadline.call(lambda: 1 / 0)


HYPOTHESIS_TESTS = """
    import numpy as np
    import jax.numpy as jnp
    from hypothesis import given, strategies as st
    from pytest_tpucourse import checks

    @given(st.just(1.0))
    def test_bad_kernel_property(impl, scale):
        x = jnp.full((8, 128), scale, jnp.float32)
        checks.assert_close(impl.double.double(x, case="pl_loop"), 2 * np.asarray(x, np.float64),
                            fn=impl.double.double, dtype=np.float32)

    def test_next_kernel_still_runs(impl):
        x = jnp.ones((8, 128), jnp.float32)
        checks.assert_close(impl.double.ok(x), 2 * np.ones((8, 128)), fn=impl.double.ok, dtype=np.float32)
"""


def test_a_replayed_hang_is_not_waited_out_twice(fake_course):
    """Hypothesis runs a failing example again to report it; the same hang fails at once the second time."""
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(HYPOTHESIS_TESTS)
    result = fake_course.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--kernel-timeout", "10", timeout=120)
    result.stdout.fnmatch_lines([
        "*test_bad_kernel_property FAILED*",
        "*test_next_kernel_still_runs PASSED*",
        "double() in exercises/ch11/double.py did not finish within 10 s (--kernel-timeout*",
        # the replay Hypothesis reports is refused at once, not waited out again
        "*It passed its deadline earlier in this run (in *test_bad_kernel_property): not run again*",
    ])


SAME_FUNCTION_TWICE = """
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks

    X = jnp.ones((8, 128), jnp.float32)

    def test_first(impl):
        checks.assert_close(impl.double.double(X, case="{case}"), 2 * np.ones((8, 128)),
                            fn=impl.double.double, dtype=np.float32)

    def test_second(impl):
        checks.assert_close(impl.double.double(X[:, :64], case="{case}"), 2 * np.ones((8, 64)),
                            fn=impl.double.double, dtype=np.float32)

    def test_other_function(impl):
        checks.assert_close(impl.double.ok(X), 2 * np.ones((8, 128)), fn=impl.double.ok, dtype=np.float32)
"""


def test_a_loop_that_cannot_be_stopped_fails_each_test_once_and_the_run_ends_by_itself(fake_course):
    """One wait for the deadline, not one per test; the summary and the state file are written,
    and the process exits although a thread still spins in XLA (it would be waited for)."""
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(SAME_FUNCTION_TWICE.replace("{case}", "while_scalar"))
    start = time.monotonic()
    result = fake_course.pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "--kernel-timeout", str(DEADLINE), timeout=120)
    elapsed = time.monotonic() - start
    result.stdout.fnmatch_lines([
        "*test_first FAILED*",
        "*test_second FAILED*",
        "*test_other_function PASSED*",
        "*It is a compiled loop that cannot be interrupted*it does by itself after its last test*",
        "*It passed its deadline earlier in this run (in exercises/ch11/test_double.py::test_first): not run "
        "again, so each of its tests fails at once until the hang is fixed.",
        "*FAIL  double*1/3 tests passed",
        "*did not finish within 3 s*  ?2 tests?",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert elapsed < 60, f"{elapsed:.0f} s: waited out the deadline more than once, or did not exit"
    state = (fake_course.pytester.path / ".tpucourse" / "state.json").read_text()
    assert '"status": "failed"' in state


SLOW_COMPILE_TESTS = """
    import time

    import jax
    import numpy as np
    import jax.numpy as jnp
    from pytest_tpucourse import checks

    def _slow(event, seconds, **kwargs):  # every XLA compile takes 4 s more
        if event.endswith("backend_compile_duration"):
            time.sleep(4)

    jax.monitoring.register_event_duration_secs_listener(_slow)

    def test_a_slow_compile_is_no_hang(impl):
        x = jnp.ones((8, 128), jnp.float32)
        checks.assert_close(impl.double.double(x), 2 * np.ones((8, 128)), fn=impl.double.double,
                            dtype=np.float32)
"""


def test_compiling_is_not_counted_against_the_deadline(fake_course):
    """The graded program is compiled before the deadline starts: a compile slower than the
    deadline (a loaded machine, a big program) is not reported as a hang."""
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    fake_course.test_file(SLOW_COMPILE_TESTS)
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", "--kernel-timeout", "2",
                                                       "--jax-cache", "none", timeout=120)
    result.stdout.fnmatch_lines(["*test_a_slow_compile_is_no_hang PASSED*"])


SWALLOWING_TESTS = """
    import os
    import signal
    import time

    def test_interrupted_where_the_interrupt_is_swallowed():
        os.kill(os.getpid(), signal.SIGINT)
        try:  # as JAX's gc callback does: the KeyboardInterrupt is caught and dropped
            time.sleep(5)
        except KeyboardInterrupt:
            pass

    def test_never_reached():
        time.sleep(30)
"""


def test_one_ctrl_c_stops_the_run_even_when_the_interrupt_is_swallowed(fake_course):
    fake_course.test_file(SWALLOWING_TESTS)
    start = time.monotonic()
    done = subprocess.run(pytest_child("-p", "no:cacheprovider", "-v"), cwd=fake_course.pytester.path,
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    assert "KeyboardInterrupt" in done.stdout, done.stdout
    assert "test_never_reached" not in done.stdout.split("KeyboardInterrupt")[0].split("swallowed")[-1]
    assert elapsed < 25, f"{elapsed:.0f} s: the run went on after Ctrl-C"
    assert done.returncode == pytest.ExitCode.INTERRUPTED
