"""The plugin's options and markers, and its behaviour outside a course."""

import jax
import jaxlib
import pytest

from pytest_tpucourse.gates import criteria


def test_options_are_registered(pytester):
    result = pytester.runpytest_subprocess("--help")
    for option in ("--solutions", "--impl-root", "--interpret", "--gates", "--chip"):
        result.stdout.fnmatch_lines([f"*{option}*"])


def test_markers_are_registered(pytester):
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.gate(n):*", "@pytest.mark.roofline(chip=None*"])


@pytest.mark.parametrize("marker, bad", [("host_interpret", "3"), ("host_interpret", "''"), ("devices", "0"),
                                         ("devices", "'four'"), ("devices", "True")])
def test_placement_markers_are_validated(fake_course, marker, bad):
    fake_course.test_file(f"""
        import pytest

        @pytest.mark.{marker}({bad})
        def test_placed():
            pass
    """)
    result = fake_course.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_placed: @pytest.mark.{marker} takes one*"])


# pytest reserves lowercase short options: a plugin registering -n stops every command (ValueError).
WITHOUT_XDIST = """
import sys
sys.modules["xdist"] = None  # as on a machine where pytest-xdist is not installed
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.runs
def test_without_xdist_the_course_runs_and_n_says_in_one_line_what_to_install(fake_course):
    import os
    import subprocess
    import sys

    fake_course.test_file("def test_nothing():\n    pass\n")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "TPUCOURSE_WARM": "0"}
    plugins = ["-p", "pytest_tpucourse.plugin", "-p", "hypothesis.extra.pytestplugin", "-p", "pytest_benchmark.plugin",
               "-p", "no:cacheprovider"]

    def run(*args):
        return subprocess.run([sys.executable, "-c", WITHOUT_XDIST, *plugins, *args], capture_output=True, text=True,
                              cwd=fake_course.pytester.path, env=env)

    assert run("--solutions").returncode == 0
    for args in (["-n", "2"], ["-n2"], ["--numprocesses=auto"]):
        refused = run(*args)
        assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stderr
        assert "pytest-xdist, which is not installed: pip install pytest-xdist" in refused.stderr
        assert "Traceback" not in refused.stderr + refused.stdout


def test_markers_work_under_strict_markers(fake_course):
    fake_course.test_file("""
        import pytest

        @pytest.mark.gate(1)
        def test_gate():
            pass

        @pytest.mark.roofline(chip="v5e", flops=1, bytes=1)
        def test_roofline():
            pass

        @pytest.mark.host_interpret("races between two TensorCores")
        @pytest.mark.devices(2)
        def test_placed():
            pass
    """)
    result = fake_course.run("--strict-markers", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*gate test: runs with --gates*"])


@pytest.mark.parametrize("bad", [str(len(criteria.GATES) + 1), "-1", "'one'", "1, 2"])
def test_gate_number_is_validated(fake_course, bad):
    fake_course.test_file(f"""
        import pytest

        @pytest.mark.gate({bad})
        def test_gate():
            pass
    """)
    result = fake_course.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_gate*gate takes one integer gate number 0-{len(criteria.GATES) - 1}*"])


def test_gates_option_selects_only_gate_tests(fake_course):
    fake_course.test_file("""
        import pytest

        @pytest.mark.gate(0)
        def test_gate_zero():
            pass

        @pytest.mark.gate(5)
        def test_gate_five():
            pass

        def test_ordinary():
            pass
    """)
    result = fake_course.run("--gates", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_gate_zero PASSED*", "*test_gate_five PASSED*"])


def test_unknown_chip_is_a_usage_error(fake_course):
    result = fake_course.run("--chip", "v9z")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--chip: unknown chip 'v9z'; known chips: v2, v3, v4, v5e*"])


@pytest.mark.parametrize("option", ["--resweep", "--finish-searches"])
def test_a_ceiling_search_option_without_gates_is_a_usage_error(fake_course, option):
    result = fake_course.run(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} *give it with --gates*"])


def test_known_chip_is_accepted_and_normalised(fake_course):
    fake_course.test_file("""
        def test_chip(request):
            assert request.config.getoption("chip") == "v5e"
    """)
    fake_course.run("--chip", "TPU-v5e").assert_outcomes(passed=1)


def test_solutions_and_impl_root_are_exclusive(fake_course, tmp_path):
    result = fake_course.run("--solutions", "--impl-root", str(tmp_path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*give one*"])


def test_impl_root_must_exist(fake_course):
    result = fake_course.run("--impl-root", "no/such/dir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--impl-root: no/such/dir is not a directory*"])


def test_plugin_is_inert_outside_a_course(pytester):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "tpucourse" not in result.stdout.str().replace("plugins: tpucourse", "")


def test_header_names_mode_backend_versions_and_tree(fake_course):
    fake_course.test_file("def test_nothing():\n    pass\n")
    result = fake_course.run("--solutions")
    result.stdout.fnmatch_lines([
        "tpucourse: grading solutions/ (the shipped reference solutions)",
        "tpucourse: kernels run under TPU interpret mode (shuffled parallel grid axes*",
        f"tpucourse: backend cpu (cpu, 8 devices), jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
        "hypothesis profile *, compilation cache */.tpucourse/jax-cache",
    ])
    fast = fake_course.run("--interpret", "fast")
    fast.stdout.fnmatch_lines([
        "tpucourse: grading exercises/ (your work)",
        "tpucourse: kernels run under the fast generic interpreter (interpret=True: uninitialised floats "
        "read NaN, but no grid shuffling, and out-of-bounds block indices clamp)",
    ])


def test_hypothesis_profiles_are_registered(fake_course):
    fake_course.test_file("""
        from hypothesis import settings

        def test_profile():
            assert settings().deadline is None
            assert settings().max_examples == 60
    """)
    result = fake_course.run("--hypothesis-profile", "thorough")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*hypothesis profile thorough*"])


def test_compiled_programs_are_cached_across_runs_unless_turned_off(fake_course):
    fake_course.test_file("""
        import jax.numpy as jnp

        def test_compiles():
            assert float((jnp.arange(4.0) * 3).sum()) == 18.0
    """)
    cache = fake_course.pytester.path / ".tpucourse" / "jax-cache"
    fake_course.run().assert_outcomes(passed=1)
    assert any(cache.iterdir()), "the first run left no compiled program in the cache"
    off = fake_course.run("--jax-cache", "none")
    off.stdout.fnmatch_lines(["*compilation cache off"])
