"""Hypothesis strategies and input builders shared by every chapter's graded tests.

Arrays are built from a drawn seed with numpy's generator rather than drawn
element by element: a kernel test needs thousands of elements, and a seed is
cheap to draw and to report, while a 256x512 array is not. Inputs are rounded
to their dtype before anyone sees them, so the kernel and the float64 oracle
start from the same numbers.

Every new shape recompiles a kernel (0.1-0.7 s under interpret mode), so shape
strategies draw from a few shapes per kind, derived from the dtype's tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from . import profiles, reproduction

# The TPU's minimal tile (sublanes, lanes) by element width: a block's last two
# dimensions must be multiples of it or equal the array's full dimensions.
TILE = {"float32": (8, 128), "bfloat16": (16, 128), "float16": (16, 128)}

DTYPES = ("float32", "bfloat16")

SHAPE_KINDS = ("single", "multi", "ragged", "degenerate")

VALUE_KINDS = ("normal", "large", "tiny", "equal_rows", "masked", "fully_masked_rows")


def seeds() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=2**31 - 1)


def dtypes(*names: str) -> st.SearchStrategy[str]:
    """One of the dtypes (a kernel compiles once per dtype); in dev, as `few`."""
    return few(*(names or DTYPES))


def few(*cases):
    """Draw from an explicit short list (each distinct shape costs a compile).

    In the dev profile, a test with explicit examples draws only the cases they use, with
    new seeds (profiles.py); the other profiles draw from every case.
    """
    return _few(cases)


@st.composite
def _few(draw, cases):
    return draw(st.sampled_from(profiles.options_to_draw(cases)))


def tile(dtype) -> tuple[int, int]:
    return TILE[np.dtype(_jnp_dtype(dtype)).name]


def shapes_2d(dtype, kind: str, *, blocks: tuple[int, int] = (2, 3)) -> list[tuple[int, int]]:
    """Representative 2-D shapes of one kind for `dtype`'s tile.

    single: exactly one tile; multi: `blocks` tiles in each dimension; ragged:
    the multi shape minus part of a tile, so the last blocks are partial;
    degenerate: a length-1 axis on either side.
    """
    sub, lane = tile(dtype)
    if kind == "single":
        return [(sub, lane)]
    if kind == "multi":
        return [(sub * blocks[0], lane * blocks[1])]
    if kind == "ragged":
        return [(sub * blocks[0] - sub // 2 + 1, lane * blocks[1] - lane // 3)]
    if kind == "degenerate":
        return [(1, lane * blocks[1]), (sub * blocks[0], 1)]
    raise ValueError(f"shape kind must be one of {SHAPE_KINDS}, got {kind!r}")


def tiled_shapes(dtype, kinds=("single", "multi", "ragged"), **kwargs) -> st.SearchStrategy:
    return st.sampled_from([s for kind in kinds for s in shapes_2d(dtype, kind, **kwargs)])


def random_array(shape, dtype, seed: int, *, scale: float = 1.0, offset: float = 0.0,
                 kind: str = "normal"):
    """A jax array rounded to `dtype`, with values of the given kind.

    normal: normal(offset, scale); large: normal scaled by 1e4 (softmax
    stability); tiny: normal scaled by 1e-30 (underflow in products);
    equal_rows: every entry of a row equal (softmax must be uniform); masked:
    about a quarter of the entries -inf (attention masks); fully_masked_rows:
    as masked, plus whole rows of -inf.
    """
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    values = rng.standard_normal(shape).astype(np.float32) * np.float32(scale) + np.float32(offset)
    if kind == "large":
        values *= np.float32(1e4)
    elif kind == "tiny":
        values *= np.float32(1e-30)
    elif kind == "equal_rows":
        values = np.broadcast_to(values[..., :1], shape).copy()
    elif kind in ("masked", "fully_masked_rows"):
        values[rng.random(shape) < 0.25] = -np.inf
        if kind == "fully_masked_rows" and len(shape) >= 1:
            rows = values.reshape(-1, shape[-1]) if shape[-1] else values.reshape(0, 0)
            rows[:: max(1, len(rows) // 3)] = -np.inf
            values = rows.reshape(shape)
    elif kind != "normal":
        raise ValueError(f"value kind must be one of {VALUE_KINDS}, got {kind!r}")
    array = jnp.asarray(values, dtype=_jnp_dtype(dtype))
    reproduction.built(array, reproduction.Recipe(shape, np.dtype(array.dtype).name, int(seed), kind,
                                                  float(scale), float(offset)))
    return array


def cotangents_like(tree, seed: int = 0):
    """Seeded standard-normal cotangents shaped and typed like a function's outputs (a pytree):
    what the checker feeds a VJP, and what a reproduction line rebuilds."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda x: jnp.asarray(rng.standard_normal(np.shape(x)).astype(np.float32), dtype=x.dtype), tree)


def as_float64(array) -> np.ndarray:
    """The exact values of a (possibly bf16) array, for a float64 reference."""
    return np.asarray(array).astype(np.float64)


@dataclass(frozen=True)
class AttentionConfig:
    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool
    dtype: str

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def arrays(self, seed: int):
        """(q, k, v) with q (B, H, Sq, D), k and v (B, Hkv, Skv, D)."""
        q = random_array((self.batch, self.heads, self.q_len, self.head_dim), self.dtype, seed)
        k = random_array((self.batch, self.kv_heads, self.kv_len, self.head_dim), self.dtype, seed + 1)
        v = random_array((self.batch, self.kv_heads, self.kv_len, self.head_dim), self.dtype, seed + 2)
        return q, k, v

    def __str__(self) -> str:
        return (f"batch {self.batch}, heads {self.heads}/{self.kv_heads} kv, q_len {self.q_len}, "
                f"kv_len {self.kv_len}, head_dim {self.head_dim}, "
                f"{'causal' if self.causal else 'non-causal'}, {self.dtype}")


def _jnp_dtype(dtype):
    import jax.numpy as jnp

    return jnp.dtype(dtype)


@st.composite
def dot_general_problems(draw, *, max_each: int = 2, sizes=(1, 2, 3, 4, 5, 6, 7)):
    """(lhs_shape, rhs_shape, dimension_numbers) of a random lax.dot_general.

    0 to max_each batch, contracting and free dimensions on each side, each side's
    dimensions in a random order, so batch and contracting pairs come out of order.
    """
    kinds = {kind: draw(st.integers(0, max_each)) for kind in ("batch", "contract", "lhs", "rhs")}
    size = {(kind, i): draw(st.sampled_from(sizes)) for kind, n in kinds.items() for i in range(n)}
    paired = [(k, i) for k in ("batch", "contract") for i in range(kinds[k])]
    lhs = draw(st.permutations(paired + [("lhs", i) for i in range(kinds["lhs"])]))
    rhs = draw(st.permutations(paired + [("rhs", i) for i in range(kinds["rhs"])]))

    def positions(side, kind):
        return tuple(side.index((kind, i)) for i in range(kinds[kind]))

    numbers = ((positions(lhs, "contract"), positions(rhs, "contract")),
               (positions(lhs, "batch"), positions(rhs, "batch")))
    return tuple(size[d] for d in lhs), tuple(size[d] for d in rhs), numbers
