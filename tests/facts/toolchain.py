"""What the facts tests share: the toolchain a fact was read on, and small ways to ask it.

A fact that differs between the supported releases (pyproject.toml's matrix) is written once per
release it was read on. On a release none of them names, the test fails and says to read the fact
again: a new JAX or libtpu then cannot keep a chapter teaching what it no longer does.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import jax
import pytest

from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse import tpu

REPO = Path(__file__).resolve().parents[2]


def for_this_jax(facts: dict):
    """facts["0.10.2"], facts["0.12.0.1"], ...: the one for the installed jax."""
    if jax.__version__ not in facts:
        pytest.fail(f"jax {jax.__version__}: this fact was read on jax {', '.join(facts)} only; read it off "
                    f"this jax, then record it here and in the chapter's README")
    return facts[jax.__version__]


def for_this_libtpu(facts: dict):
    """facts[(0, 0, 42)], facts[(0, 0, 50)]: the one for the installed libtpu's release."""
    release = libtpu.libtpu_release()
    if release not in facts:
        known = ", ".join(".".join(map(str, r)) for r in facts)
        pytest.fail(f"libtpu {libtpu.libtpu_version()}: this fact was read on libtpu {known} only; read it "
                    f"off this libtpu, then record it here and in the chapter's README")
    return facts[release]


def compiler():
    """The course's compile for a described TPU (`tpu.compile_for`: a chip by name, the course's default
    chip when none is named); skips with one line without libtpu."""
    libtpu.skip_unless_available()
    return tpu.compile_for


def refusal(fn, *args, **kwargs) -> libtpu.TpuCompileError | None:
    """None if libtpu compiles fn(*args) for a v5e (or kwargs' chip), else its refusal."""
    try:
        compiler()(fn, *args, **kwargs)
    except libtpu.TpuCompileError as error:
        return error
    return None


@contextlib.contextmanager
def interpreted(params):
    """Kernels run under `params` (pltpu.InterpretParams: TPU interpret mode; True: the generic
    interpreter), whatever the session set; the simulated TPU state is dropped afterwards."""
    from jax.experimental.pallas import tpu as pltpu

    try:
        with pltpu.force_tpu_interpret_mode(params):
            yield
    finally:
        pltpu.reset_tpu_interpret_mode_state()


def tpu_interpret(**settings):
    """TPU interpret mode as the course runs it (random_seed 0), with `settings` on top."""
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.InterpretParams(**{"random_seed": 0, **settings})


def course_file(relative: str):
    """A Python file of the course loaded as a module (a chapter's graded tests, a bench script): the
    kernels and figures a README describes, used as they are."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(f"course_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_block(body, out_dtype=None):
    """A kernel applying `body` to its whole arrays in one step, no grid: what the compiler emits for
    `body` alone."""
    from jax.experimental import pallas as pl

    def call(*arrays):
        def kernel(*refs):
            refs[-1][...] = body(*[r[...] for r in refs[:-1]])

        shape = jax.eval_shape(body, *arrays).shape
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, out_dtype or arrays[0].dtype))(*arrays)
    return call
