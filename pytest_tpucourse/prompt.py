"""What a reproduction line needs at a Python prompt: JAX set up as a graded run, the inputs, the graded file.

A failed check prints lines to paste into `python` at the course root (reproduction.py):

    from pytest_tpucourse.prompt import *; x = random_array((256, 512), 'bfloat16', 7)
    out = load('exercises/ch11/matmul.py').matmul(x, x.T, bm=128)

Importing this module starts JAX as a graded run does: the simulated CPU devices
(--cpu-devices' default) and kernels under TPU interpret mode off a TPU, natively on one.
The function then runs as written, without the grader around it: an error shows its own
traceback, and the values can be inspected.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .grading import backend
from .strategies import cotangents_like, random_array

__all__ = ["jax", "jnp", "np", "random_array", "cotangents_like", "load", "mesh"]

backend.force_cpu_devices(backend.DEFAULT_CPU_DEVICES)
RUN = backend.select("auto")


def load(path: str):
    """The module at `path` (`exercises/ch11/matmul.py`, or in any tree laid out like it),
    imported as the grader imports it: its `from . import other` imports work."""
    from .grading.tree import import_file

    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file (run python at the course root)")
    return import_file(file)


def mesh(n: int, axis: str = "x"):
    """A 1-D mesh of the first n devices, as the graded tests' `mesh` fixture builds it."""
    from jax.sharding import AxisType

    return jax.make_mesh((n,), (axis,), devices=jax.devices()[:n], axis_types=(AxisType.Auto,))
