"""Hypothesis strategies and input builders shared by every chapter's graded tests.

Arrays are built from a drawn seed with numpy's generator rather than drawn
element by element: a kernel test needs thousands of elements, and shrinking a
seed is cheap while shrinking a 256x512 array is not. Inputs are rounded to
their dtype before anyone sees them, so the kernel and the float64 reference
start from the same numbers.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

# The TPU's minimal tile (sublanes, lanes) by element width: a block dimension
# must be a multiple of it or equal the array's full dimension.
TILE = {"float32": (8, 128), "bfloat16": (16, 128), "float16": (16, 128)}

DTYPES = ("float32", "bfloat16")


def seeds() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=2**31 - 1)


def dtypes(*names: str) -> st.SearchStrategy[str]:
    return st.sampled_from(names or DTYPES)


def few(*cases):
    """Draw from an explicit short list (each distinct shape costs a compile)."""
    return st.sampled_from(cases)


def tile(dtype) -> tuple[int, int]:
    return TILE[np.dtype(_jnp_dtype(dtype)).name]


def random_array(shape, dtype, seed: int, *, scale: float = 1.0, offset: float = 0.0):
    """A jax array of normal(offset, scale) values, rounded to `dtype`."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale) + np.float32(offset)
    return jnp.asarray(values, dtype=_jnp_dtype(dtype))


def as_float64(array) -> np.ndarray:
    """The exact values of a (possibly bf16) array, for a float64 reference."""
    return np.asarray(array).astype(np.float64)


def _jnp_dtype(dtype):
    import jax.numpy as jnp

    return jnp.dtype(dtype)
