"""Where each test runs on a TPU host (grading/placement.py, run/host_cpu.py), held without a chip.

The rules are a pure function of a test's markers and the host; the shipped chapters carry the
markers their checks need; and a run on a stand-in TPU host (support.FAKE_TPU_CONFTEST: JAX's
default backend reports two TPU devices, while a process started with JAX_PLATFORMS=cpu sees the
CPU) sends the tests placed off the chip to host-CPU children and logs their reports as its own.
"""

import ast
import re
import textwrap

import pytest

from pytest_tpucourse.grading import context, placement

from .support import FAKE_TPU_CONFTEST, REPO

ONE_CHIP = placement.Host("tpu", kernels_native=True, device_count=1)


@pytest.mark.parametrize("host", [placement.Host("cpu", False, 8), placement.Host("tpu", False, 1),
                                  placement.Host("gpu", True, 1)], ids=["cpu", "tpu-interpret", "gpu"])
def test_off_a_native_tpu_everything_runs_here(host):
    for interpret_part, devices in ((None, None), ("races", None), (None, 8), ("races", 8)):
        assert placement.decide(interpret_part=interpret_part, devices_needed=devices, host=host) == \
            placement.Placement(placement.HERE)


def test_on_a_native_tpu_interpret_parts_run_on_both_and_big_meshes_on_the_cpu():
    decide = placement.decide
    assert decide(interpret_part=None, devices_needed=None, host=ONE_CHIP).where == placement.HERE
    both = decide(interpret_part="races between two TensorCores", devices_needed=None, host=ONE_CHIP)
    assert both.where == placement.BOTH and "races between two TensorCores" in both.why
    whole = decide(interpret_part="DMA orders", devices_needed=8, host=ONE_CHIP)
    assert (whole.where, whole.cpu_devices) == (placement.HOST_CPU, 8) and "8 CPU devices" in whole.why
    eight_chips = placement.Host("tpu", True, 8)
    assert decide(interpret_part=None, devices_needed=8, host=eight_chips).where == placement.HERE
    assert decide(interpret_part="DMA orders", devices_needed=4, host=eight_chips).where == placement.BOTH
    assert decide(interpret_part=None, devices_needed=1, host=ONE_CHIP).where == placement.HERE


def test_an_interpret_only_check_steps_aside_natively_only_where_the_test_is_placed_to():
    run = context.GradingContext(native_tpu=True, interpret_elsewhere=frozenset({"t.py::placed"}))
    context.activate(run)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PYTEST_CURRENT_TEST", "t.py::placed (call)")
            assert placement.interpret_part_here("the race check") is False
            patch.setenv("PYTEST_CURRENT_TEST", "t.py::other (call)")
            with pytest.raises(placement.NotPlaced, match=r"host_interpret\('the race check'\)"):
                placement.interpret_part_here("the race check")
        run.native_tpu = False
        assert placement.interpret_part_here("the race check") is True
    finally:
        context.deactivate(run)


# What reaches a check only TPU interpret mode can make (pytest_tpucourse/checking/tpu_rules.py).
INTERPRET_ONLY = {"checking_races", "assert_no_races", "assert_no_races_in_backward", "interpret_setting",
                  "assert_out_of_bounds_raises", "assert_correct_in_each_dma_mode"}


def _called(node) -> set[str]:
    return {n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id
            for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name))}


def _marks(decorators) -> set[str]:
    found = set()
    for decorator in decorators:
        found |= set(re.findall(r"pytest\.mark\.(host_interpret|devices)\b", ast.unparse(decorator)))
    return found


def unplaced_tests(path) -> list[str]:
    """The tests of a graded test file that reach an interpret-only check without a host_interpret
    marker, or take the mesh fixture without a devices marker (module-level pytestmark counts)."""
    tree = ast.parse(path.read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    module_marks = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            module_marks |= _marks([node.value])

    def reached(name, seen):
        if name in seen or name not in functions:
            return set()
        seen.add(name)
        calls = _called(functions[name])
        return calls.union(*(reached(c, seen) for c in calls))

    missing = []
    for name, function in functions.items():
        if not name.startswith("test"):
            continue
        marks = module_marks | _marks(function.decorator_list)
        if reached(name, set()) & INTERPRET_ONLY and "host_interpret" not in marks:
            missing.append(f"{path.name}::{name}: reaches an interpret-only check, no host_interpret marker")
        if "mesh" in [a.arg for a in function.args.args] and "devices" not in marks:
            missing.append(f"{path.name}::{name}: takes the mesh fixture, no devices marker")
    return missing


def test_the_shipped_chapters_mark_what_must_run_on_the_hosts_cpu():
    files = sorted((REPO / "exercises").glob("ch*/test_*.py"))
    assert len(files) > 40
    assert [line for path in files for line in unplaced_tests(path)] == []


def test_the_marker_rule_finds_a_test_without_its_marker(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text(textwrap.dedent("""
        import pytest
        from pytest_tpucourse import tpu

        def _races(impl):
            with tpu.checking_races(impl.f):
                pass

        def test_unmarked(impl):
            _races(impl)

        @pytest.mark.host_interpret("races")
        def test_marked(impl):
            _races(impl)

        def test_mesh_unmarked(impl, mesh):
            mesh(2)
    """))
    assert unplaced_tests(path) == [
        "test_x.py::test_unmarked: reaches an interpret-only check, no host_interpret marker",
        "test_x.py::test_mesh_unmarked: takes the mesh fixture, no devices marker"]


STAND_IN_TESTS = '''
import os

import jax
import pytest

from pytest_tpucourse import tpu

ON_THE_HOSTS_CPU = os.environ.get("JAX_PLATFORMS") == "cpu"


@pytest.mark.host_interpret("races between two TensorCores")
def test_both_halves_pass(impl):
    with tpu.checking_races(impl.double.double):
        assert float(impl.double.double(jax.numpy.ones(())) ) == 2.0


@pytest.mark.host_interpret("races between two TensorCores")
def test_only_the_interpret_half_fails(impl):
    assert not ON_THE_HOSTS_CPU, "the interpret-mode half found a race"


@pytest.fixture(scope="module")
def module_resource():
    yield "set up"


def test_a_module_fixture_here_before_tests_placed_elsewhere(module_resource):
    assert module_resource == "set up"


@pytest.mark.devices(4)
def test_four_devices_run_on_the_cpu(mesh):
    assert ON_THE_HOSTS_CPU
    assert mesh(4).devices.size == 4


@pytest.mark.devices(4)
def test_a_child_that_dies(mesh):
    os._exit(3)


def test_an_unplaced_interpret_check(impl):
    with tpu.checking_races(impl.double.double):
        impl.double.double(jax.numpy.ones(()))
'''

# In another module: a test here after tests placed elsewhere finds the earlier module torn down.
AFTER_THE_PLACED = '''
def test_in_the_next_module():
    pass
'''


@pytest.mark.runs
def test_a_run_on_a_tpu_host_sends_what_only_the_cpu_can_run_there_and_logs_it_as_its_own(fake_course):
    fake_course.pytester.makeconftest(FAKE_TPU_CONFTEST)
    fake_course.test_file(STAND_IN_TESTS)
    fake_course.test_file(AFTER_THE_PLACED, "test_double_after.py")
    result = fake_course.run("--solutions", "-v", "-p", "no:randomly", "exercises/ch11/test_double.py",
                             "exercises/ch11/test_double_after.py")
    result.assert_outcomes(passed=4, failed=3)
    assert "previous item was not torn down properly" not in result.stdout.str()
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*::test_both_halves_pass PASSED [[]values native, interpret part on host CPU[]]*",
        "*::test_only_the_interpret_half_fails FAILED [[]values native, interpret part on host CPU[]]*",
        "*::test_four_devices_run_on_the_cpu PASSED [[]host CPU[]]*",
        "*::test_a_child_that_dies FAILED [[]host CPU[]]*",
    ])
    assert "the interpret-mode half found a race" in out
    assert "found by its part under TPU interpret mode on this host's CPU; its values passed natively" in out
    assert re.search(r"placed on this host's CPU \(on 4 CPU devices.*ended \(exit code 3\) without reporting it",
                     out, re.S)
    assert "host_interpret('the race check (2 TensorCores per device)')" in out
    assert "on this TPU host, 2 tests ran natively and again under TPU interpret mode" in out
    assert "2 multi-device tests ran on this host's CPU devices" in out


def test_on_a_native_tpu_float32_calls_are_judged_at_highest_and_bf16_ones_at_the_default():
    """grading/context.py's graded_precision: f32 products at f32's precision on a TPU (its default is one
    bf16 pass); bf16 and mixed inputs at the default (Mosaic refuses a bf16 dot at HIGHEST); a no-op off it."""
    import jax
    import jax.numpy as jnp

    f32, bf16 = jnp.ones((2, 2), jnp.float32), jnp.ones((2, 2), jnp.bfloat16)

    def precision_inside(*args):
        with context.graded_precision(args):
            return jax.config.jax_default_matmul_precision

    run = context.GradingContext(native_tpu=True)
    context.activate(run)
    try:
        assert precision_inside(f32, (f32, 3)) == "highest"
        assert precision_inside(bf16, bf16) is None and precision_inside(f32, bf16) is None
        assert precision_inside(jnp.arange(3)) is None  # no float input
        run.native_tpu = False
        assert precision_inside(f32) is None
    finally:
        context.deactivate(run)


def test_on_a_native_tpu_check_grads_differences_its_forward_at_the_graded_precision(monkeypatch):
    """jax.test_util.check_grads divides the forward's rounding by its step: at a TPU's default one
    bf16 pass an f32 forward's noise is a few parts in a thousand, and a right custom_vjp failed by 10.5
    (chapter 13) and 147 (chapter 15) on a v5e. The check runs at the precision the graded call runs at."""
    import jax
    import jax.numpy as jnp
    import jax.test_util

    from pytest_tpucourse import checks, references

    @jax.custom_vjp
    def double(x):
        return 2.0 * x

    double.defvjp(lambda x: (2.0 * x, None), lambda _, g: (2.0 * g,))
    seen = []
    real_check_vjp = jax.test_util.check_vjp

    def check_vjp(*args, **kwargs):
        seen.append(jax.config.jax_default_matmul_precision)
        return real_check_vjp(*args, **kwargs)

    monkeypatch.setattr(jax.test_util, "check_vjp", check_vjp)
    run = context.GradingContext(native_tpu=True)
    context.activate(run)
    try:
        checks.assert_grads_match(
            checks.graded(double, "double()"), (jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32),),
            reference=references.Reference("2x", lambda x: 2.0 * x, lambda x: 2.0 * x), argnames=("dx",),
            check_custom_vjp=True)
    finally:
        context.deactivate(run)
    assert seen == ["highest"]
