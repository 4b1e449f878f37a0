"""Many devices in one pytest run: the simulated CPU devices and the `mesh` fixture."""

import pytest

from .support import FAKE_TPU_CONFTEST

RING_TEST = """
import jax
import jax.numpy as jnp
from jax import lax

def test_ring(mesh):
    m = mesh(4)
    shift = jax.shard_map(lambda a: lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)]),
                          mesh=m, in_specs=jax.P("x"), out_specs=jax.P("x"))
    assert jax.jit(shift)(jnp.arange(8.0)).tolist() == [6, 7, 0, 1, 2, 3, 4, 5]

def test_single_device_code_still_runs():
    assert float(jnp.ones(3).sum()) == 3.0

def test_count():
    print("DEVICES", len(jax.devices()))
"""


def test_eight_cpu_devices_by_default_and_a_mesh_of_four(fake_course):
    fake_course.test_file(RING_TEST)
    result = fake_course.run("-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*backend cpu (cpu, 8 devices)*", "*DEVICES 8*"])


def test_a_mesh_larger_than_the_run_skips_saying_what_it_needs(fake_course):
    fake_course.test_file(RING_TEST)
    result = fake_course.run("--cpu-devices", "2", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*needs 4 devices; this run has 2 CPU device(s) (--cpu-devices)*"])


def test_a_backend_started_before_the_plugin_keeps_its_count(fake_course):
    """Too late to change: JAX already started (a conftest ran an op); the run goes on."""
    fake_course.pytester.makeconftest("import jax.numpy as jnp\njnp.zeros(1).block_until_ready()\n")
    fake_course.test_file(RING_TEST)
    result = fake_course.run("-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*backend cpu (cpu, 1 device)*", "*needs 4 devices; this run has 1 CPU*"])


@pytest.mark.parametrize("bad", ["0", "-3"])
def test_cpu_devices_must_be_positive(fake_course, bad):
    fake_course.test_file("def test_nothing():\n    pass\n")
    result = fake_course.run("--cpu-devices", bad)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cpu-devices: needs at least 1 CPU device*"])


ON_THE_ACCELERATOR = """
import jax

def test_needs_four_chips(mesh):
    mesh(4)

def test_the_tests_see_the_accelerators_devices():
    assert [d.platform for d in jax.devices()] == ["tpu", "tpu"]
    assert len(jax.devices("cpu")) == 8  # forced, but not what a mesh is built from
"""


def test_on_an_accelerator_the_mesh_uses_its_devices_and_says_what_is_missing(fake_course):
    fake_course.pytester.makeconftest(FAKE_TPU_CONFTEST)
    fake_course.test_file(ON_THE_ACCELERATOR)
    result = fake_course.run("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*kernels run under natively*",
        "*backend tpu (TPU v5 lite, 2 devices)*",
        "*needs 4 devices; this run has 2 tpu device(s)*",
    ])
