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
