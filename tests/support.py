"""Helpers for the plugin's own tests: fake courses and runs of the real chapters."""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def readme_sections() -> list[str]:
    """docs/authoring.md section 3's README sections, in order, as it names them in bold."""
    text = (REPO / "docs" / "authoring.md").read_text(encoding="utf-8")
    section = text[text.index("## 3. The README"):text.index("## 4. ")]
    return [" ".join(name.split()) for name in re.findall(r"\*\*([^*]+)\*\*", section)]


def compiler_retiles_int8() -> bool:
    """libtpu 0.0.50 re-tiles an int8 block that is not made of whole (32, 128) tiles, which 0.0.42
    refuses (E2002): tests of that verdict keep each release's (exercises/ch07/README.md, a column
    per libtpu)."""
    from pytest_tpucourse.compiler import libtpu

    return (libtpu.libtpu_release() or (0, 0, 0)) >= (0, 0, 50)


def chromium() -> str:
    """The system's Chromium for the browser tests (x-ray page, course site); skip, saying so, without one."""
    found = os.environ.get("TPUCOURSE_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        pytest.skip("no browser: the web pages are tested in Chromium (apt-get install chromium)")
    return found


def is_xdist_variable(name: str) -> bool:
    """pytest-xdist tells its workers who they are through these variables. A child pytest that
    inherits them takes itself for a worker: pytest-benchmark turns itself off, and gate tests
    fail as if run with -n. Child runs started by this suite leave them out."""
    return name.startswith("PYTEST_XDIST_")


FAKE_COURSE_TOML = """
[course]
title = "fake course"
chapters_total = 15

[[chapters]]
id = "ch11"
title = "Pallas fundamentals"
kind = "stage"
stage = 1
gate = 1

[[chapters.exercises]]
name = "double"
function = "double"
summary = "Return 2 * x."
hints = ["multiply by two", "really, just x * 2"]
"""


# A stand-in for a TPU host (none exists here): the conftest makes JAX's default backend
# report two TPU devices, while the CPU backend still starts with the forced count. A process
# started with JAX_PLATFORMS=cpu (a run's host-CPU half, run/host_cpu.py) sees the CPU, as on a TPU host.
FAKE_TPU_CONFTEST = """
import os

import jax

if os.environ.get("JAX_PLATFORMS") != "cpu":
    _cpu_devices = jax.devices

    class FakeTpu:
        platform = "tpu"
        device_kind = "TPU v5 lite"

        def __init__(self, index):
            self.id = index

    def devices(backend=None):
        return _cpu_devices(backend) if backend is not None else [FakeTpu(0), FakeTpu(1)]

    jax.devices = devices
    jax.default_backend = lambda: "tpu"
"""


class FakeCourse:
    """A one-exercise course in a pytester directory: exercises/ch11/double.py."""

    def __init__(self, pytester: pytest.Pytester):
        self.pytester = pytester
        pytester.makefile(".toml", course=FAKE_COURSE_TOML)
        pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\naddopts = "--import-mode=importlib"\n')
        for tree in ("exercises", "solutions"):
            (pytester.path / tree / "ch11").mkdir(parents=True)
        self.write("exercises", "double", 'def double(x):\n    raise NotImplementedError("write double()")\n')
        self.write("solutions", "double", "def double(x):\n    return x * 2\n")

    def write(self, tree: str, module: str, source: str) -> Path:
        path = self.pytester.path / tree / "ch11" / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    def test_file(self, source: str, name: str = "test_double.py") -> Path:
        path = self.pytester.path / "exercises" / "ch11" / name
        path.write_text(textwrap.dedent(source))
        return path

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def run_chapter(pytester: pytest.Pytester, chapter: str, *args: str,
                files: list[str] | None = None) -> pytest.RunResult:
    """Run the real course's graded tests of one chapter (or some of its files) in a subprocess."""
    folder = REPO / "exercises" / chapter
    targets = [str(folder / name) for name in files] if files is not None else [str(folder)]
    return pytester.runpytest_subprocess(*targets, "--rootdir", str(REPO), "-p", "no:cacheprovider",
                                         *args)


# The chapters whose graded functions are kernels: each of their mutants names its cause
# (tests/mutants/chNN.toml), and the first suspect their failure reports name is measured.
KERNEL_CHAPTERS = ("ch06", "ch11", "ch13", "ch14", "ch15")


def first_failure(output: str) -> str:
    """The first failure a run's report shows (its FAILURES section's first entry), without the
    reproduction lines and the notes after it: what a learner reads first."""
    if "= FAILURES =" not in output:
        return ""
    section = output.split("= FAILURES =", 1)[1].partition("\n")[2]
    entries = re.split(r"^_{3,} .* _{3,}$", section, flags=re.MULTILINE)
    first = next((e for e in entries if e.strip()), "")
    first = re.split(r"^=+ ", first, maxsplit=1, flags=re.MULTILINE)[0]
    return first.split("\n  reproduce (", 1)[0].split("\n  its inputs (", 1)[0].strip()


def noise(output: str) -> list[str]:
    """What no failure report of the course may show: the race detector's raw dump, JAX's advice to
    file a bug, hypothesis' own example block, and a line ending on a colon with nothing under it."""
    found = [f"raw text: {marker!r}" for marker in ("RACE DETECTED", "NpVectorClock", "Please file a bug",
                                                     "Please file an issue", "Failing explicit example",
                                                     "Falsifying example") if marker in output]
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if not line.rstrip().endswith(":") or line.startswith(("=", "_", "platform ", "rootdir", "plugins")):
            continue
        if re.match(r"\s*>?\s*\d+ \| ", line):  # a numbered listing of source code the report quotes
            continue
        following = next((n for n in lines[index + 1:] if n.strip()), "")
        indent = len(line) - len(line.lstrip())
        if len(following) - len(following.lstrip()) <= indent:
            found.append(f"a line ending on a bare colon: {line.strip()!r}")
    return found


def failed_files(result: pytest.RunResult) -> set[str]:
    """Graded test files with at least one failure in a run's short summary."""
    return set(re.findall(r"^FAILED \S*?/(test_\w+\.py)::", result.stdout.str(), re.MULTILINE))



# Python code that gives a child Python's own SIGINT handling, even where this suite runs with
# SIGINT ignored (started in the background from a script: the shell ignores SIGINT there and
# children inherit that). Prefix a child's `-c` code with it when a test interrupts the child.
DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


def pytest_child(*args: str) -> list[str]:
    """The command of a pytest child process that a test may interrupt with SIGINT."""
    return [sys.executable, "-c", DEFAULT_SIGINT + f"import sys, pytest; sys.exit(pytest.main({list(args)!r}))"]


def kernel_test_file(then: str = "") -> str:
    """A test file for the fake course whose one test runs a Pallas kernel (doubling an (8, 128)
    block, under the run's interpret mode); `then`: more lines of that test, at its indentation."""
    return textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl

        def double(x):
            return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        def test_double():
            assert float(jax.jit(double)(jnp.ones((8, 128)))[0, 0]) == 2.0
    """) + textwrap.indent(textwrap.dedent(then).strip("\n"), "    ") + "\n"


# A graded test of the fake course's double() exercise, two cases (test_state, learner CLI, watch).
GRADED_TEST = """
    import numpy as np
    from pytest_tpucourse import checks

    def test_double(impl):
        x = np.arange(4, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64),
                            fn=impl.double.double, dtype=np.float32)

    def test_double_again(impl):
        x = np.ones(3, dtype=np.float32)
        checks.assert_close(impl.double.double(x), 2.0 * x.astype(np.float64),
                            fn=impl.double.double, dtype=np.float32)
"""


def assert_short_report(result):
    """No traceback through the plugin or JAX in the report."""
    out = result.stdout.str()
    assert "Traceback" not in out, out
    assert "pytest_tpucourse/" not in out, out
    assert "site-packages" not in out, out


def mark_done_as_a_run_would(course_root: Path, exercises) -> None:
    """State entries for `exercises` (core.course.Exercise) as a run that passed every test writes
    them: named run, test-file hashes, counts, seal. A hand-written `{"status": "done"}` is "not
    from a run" (docs/earned.md), so tests of what reads the state write it this way."""
    from pytest_tpucourse.learner import state

    run_id = "test-run"

    def change(data):
        stamp = state.now()
        for exercise in exercises:
            test_file = Path(course_root) / exercise.test_path
            entry = {
                "status": "done", "tree": "exercises", "tests_passed": 1, "tests_skipped": 0,
                "tests_failed": 0, "tests_total": 1, "message": "",
                "module_sha256": state.file_digest(Path(course_root) / exercise.module_path),
                "test_files": {exercise.test_path: state.file_digest(test_file)},
                "tests_shipped": True, "run": run_id, "date": stamp,
            }
            entry["seal"] = state.seal(exercise.key, entry)
            data["exercises"][exercise.key] = entry
        data["runs"][run_id] = {"date": stamp, "exercises": sorted(e.key for e in exercises)}

    state.update(course_root, change)
