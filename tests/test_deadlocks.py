"""Distributed kernels that deadlock: one short failure naming every device's wait, no hang.

Each case runs the graded tests of a fake course in its own pytest subprocess, with a
hard timeout, on the simulated CPU devices of an ordinary run.
"""

import time

import pytest
from .support import assert_short_report


KERNELS = """
    import functools
    import time

    import jax
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _ring_kernel(x_ref, o_ref, send, recv, *, wait_first):
        me, n = lax.axis_index("x"), lax.axis_size("x")
        right, left = lax.rem(me + 1, n), lax.rem(me + n - 1, n)
        barrier = pltpu.get_barrier_semaphore()
        if wait_first:  # every device waits for a signal that no device has sent yet
            pl.semaphore_wait(barrier, 1)
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        if not wait_first:
            pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,))
        copy.start()
        copy.wait()

    def double(x, *, mesh, case="ok"):
        if case == "sleep":
            time.sleep(100)
        def per_device(shard):
            return pl.pallas_call(
                functools.partial(_ring_kernel, wait_first=case == "deadlock"),
                out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
                compiler_params=pltpu.CompilerParams(collective_id=0))(shard)
        return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"),
                             check_vma=False)(x) * 2

    def ring(x, *, mesh):  # another graded function: a hang of double() fails double()'s later calls only
        return double(x, mesh=mesh)
"""

TESTS = """
    import numpy as np
    import jax.numpy as jnp
    import pytest
    from pytest_tpucourse import checks

    X = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)

    def expected(n):
        return 2 * np.roll(np.asarray(X, np.float64), 64 // n, axis=0)

    {marker}
    def test_bad_kernel(impl, mesh):
        checks.assert_close(impl.double.double(X, mesh=mesh(4), case="{case}"), expected(4),
                            fn=impl.double.double, dtype=np.float32)

    def test_next_kernel_on_eight_devices_still_runs(impl, mesh):
        checks.assert_close(impl.double.ring(X, mesh=mesh(8)), expected(8), fn=impl.double.ring,
                            dtype=np.float32)
"""

NOISE = ("BrokenBarrierError", "TimeoutError", "Traceback", "io_callback failed")


def _run(fake_course, case, marker=""):
    fake_course.write("exercises", "double", KERNELS)
    fake_course.test_file(TESTS.replace("{case}", case).replace("{marker}", marker))
    start = time.monotonic()
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=180)
    return result, time.monotonic() - start


def test_a_deadlock_stops_at_once_naming_every_devices_wait(fake_course):
    result, elapsed = _run(fake_course, "deadlock")
    result.stdout.fnmatch_lines([
        "*test_bad_kernel FAILED*",
        "*test_next_kernel_on_eight_devices_still_runs PASSED*",
        "double() in exercises/ch11/double.py deadlocked: every simulated device waits on a semaphore that no "
        "device will signal any more (TPU interpret mode; stopped without waiting out its 60 s deadline).",
        "  What the simulated devices were doing:",
        "    devices 0-3: waits on a barrier semaphore for 1 (it holds 0)",
        "  It was stopped; the other tests still run.",
    ])
    assert_short_report(result)
    for noise in NOISE:  # the interpreter's threads' tracebacks stay out of the report
        assert noise not in result.stdout.str() and noise not in result.stderr.str(), noise
    assert elapsed < 45, f"the deadlock took {elapsed:.0f} s: it waited for the 60 s deadline"


def test_a_tests_own_kernel_timeout_is_shorter_than_the_runs(fake_course):
    result, elapsed = _run(fake_course, "sleep", marker="@pytest.mark.kernel_timeout(2)")
    result.stdout.fnmatch_lines([
        "*test_bad_kernel FAILED*",
        "*test_next_kernel_on_eight_devices_still_runs PASSED*",
        "double() in exercises/ch11/double.py did not finish within 2 s (this test's kernel_timeout marker*",
    ])
    assert elapsed < 45


def test_a_kernel_timeout_marker_needs_a_positive_number(fake_course):
    result, _ = _run(fake_course, "ok", marker="@pytest.mark.kernel_timeout(0)")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*@pytest.mark.kernel_timeout takes one positive number of seconds, got "
                                 "kernel_timeout(0)*"])


# One device, two simulated cores: a kernel that waits for a copy it never started, as the race
# detector runs it (tpu.interpret_setting("races"): two TensorCores per device).
NEVER_STARTED = """
    import jax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _kernel(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm, buf, sem).wait()  # no .start(): nothing will ever signal sem
        o_ref[...] = buf[...]

    def copy(x):
        return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA])(x)

    def copy_again(x):  # another graded function: its report is not folded into copy()'s
        return copy(x)
"""

NEVER_STARTED_TESTS = """
    import numpy as np
    import jax.numpy as jnp
    import pytest
    from pytest_tpucourse import checks, tpu

    @pytest.mark.parametrize("name, rows", [("copy", 24), ("copy_again", 8)])  # 12,288 bytes, then 4,096
    def test_copy(impl, name, rows):
        x = jnp.ones((rows, 128), jnp.float32)
        fn = getattr(impl.double, name)
        with tpu.interpret_setting("races", fn):
            checks.assert_close(fn(x), np.ones((rows, 128)), fn=fn, dtype=np.float32)
"""


def test_a_deadlock_on_two_cores_is_stopped_and_each_case_reports_its_own_wait(fake_course):
    """Under the race detector a device runs two simulated cores: one waits for good, the other has
    finished. That is a deadlock too; and the second case's report names its own wait (4096 bytes),
    not the first case's, whose stopped threads may not have unwound yet."""
    fake_course.write("exercises", "double", NEVER_STARTED)
    fake_course.test_file(NEVER_STARTED_TESTS)
    start = time.monotonic()
    result = fake_course.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=300)
    elapsed = time.monotonic() - start
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*test_copy?copy-24? FAILED*",
        "*test_copy?copy_again-8? FAILED*",
        "copy() in exercises/ch11/double.py deadlocked: every simulated device waits on a semaphore that no "
        "device will signal any more (TPU interpret mode; stopped without waiting out its 60 s deadline).",
        "  What the simulated devices were doing:",
        "    device 0 core 0: waits on a DMA semaphore for 12288 bytes (it holds 0) at *double.py*",
        "    device 0 core 1: finished its kernel and waits for the device's other cores",
        "  It was stopped; the other tests still run.",
        "copy_again() in exercises/ch11/double.py deadlocked: *",
        "  What the simulated devices were doing:",
        "    device 0 core 0: waits on a DMA semaphore for 4096 bytes (it holds 0) at *double.py*",
        "    device 0 core 1: finished its kernel and waits for the device's other cores",
        "  It was stopped; the other tests still run.",
    ])
    assert "compiled loop that cannot be interrupted" not in out, out
    assert_short_report(result)
    assert elapsed < 45, f"the deadlocks took {elapsed:.0f} s: they waited for the 60 s deadline"


def test_a_repeated_report_does_not_show_the_waits_of_another_call():
    """A function that passed its deadline is not run again: its later tests' reports carry the first
    call's waits, which describe another case (another block's bytes), so they say none."""
    from pytest_tpucourse.core.jax_internals import BlockedWait
    from pytest_tpucourse.grading import deadline, messages

    first = deadline.DeadlineExceeded(5, still_running=False, first_test="test_first")
    first.waits = [BlockedWait(0, "DMA semaphore", 12288, 0, "double_buffering.py:39")]
    assert "waits on a DMA semaphore for 12288 bytes" in messages.deadline_message("f()", first)
    again = messages.deadline_message("f()", first.again())
    assert "12288" not in again and "What the simulated devices were doing" not in again, again
    assert "It passed its deadline earlier in this run (in test_first): not run again" in again
