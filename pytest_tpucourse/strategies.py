"""Hypothesis strategies and input builders shared by every chapter's graded tests.

Arrays are built from a drawn seed with numpy's generator rather than drawn
element by element: a kernel test needs thousands of elements, and a seed is
cheap to draw and to report, while a 256x512 array is not. Inputs are rounded
to their dtype before anyone sees them, so the kernel and the float64 oracle
start from the same numbers.

Every new shape recompiles a kernel (0.1-0.7 s under interpret mode), so shape
strategies draw from a few shapes per kind, derived from the dtype's tile.

Bugs hide where every drawn case looks alike. `unequal_blocks` gives block-size sets
whose members all differ (a kernel that swaps bk and bn, or block_q and block_kv,
passes wherever they are equal); `dims_around` gives a dimension below, equal to and
above its block, and ragged (a grid derived before the block is clamped, or floored
with `//`, passes wherever every dimension is a multiple of its block); the value
kinds of `random_array` and `AttentionConfig.arrays` stress a formula rather than
the values' scale (an epsilon in the wrong place, a running max started at 0).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from .core import profiles
from .readers import reproduction

__all__ = [
    "as_float64", "attention_configs", "ATTENTION_KINDS", "AttentionConfig", "booleans",
    "cotangents_like", "DIM_KINDS", "dims_around", "dot_general_problems", "DTYPES", "dtypes",
    "few", "jnp_asarray", "LOW_VARIANCE_STD", "random_array", "seeds", "SHAPE_KINDS",
    "shapes_2d", "SPIKE", "TILE", "tile", "tiled_shapes", "timed_input", "unequal_blocks", "VALUE_KINDS",
]


# The TPU's native tile (sublanes, lanes) by element width: the shapes a dtype's
# blocks are drawn around. (The lowering's legality rule is (8, 128) or the full
# dimension for every dtype; (16, 128) is where bf16 packs two values per 32-bit
# sublane, a matter of speed, not of legality.)
TILE = {"float32": (8, 128), "bfloat16": (16, 128), "float16": (16, 128)}

DTYPES = ("float32", "bfloat16")

SHAPE_KINDS = ("single", "multi", "ragged", "degenerate")

VALUE_KINDS = ("normal", "large", "tiny", "equal_rows", "masked", "fully_masked_rows",
               "low_variance", "spike")

ATTENTION_KINDS = ("normal", "huge_logits", "negative_first_key")

# low_variance rows spread this much (times `scale`): a variance of about 1e-5, the
# usual layer-norm epsilon, so where eps goes decides the result.
LOW_VARIANCE_STD = 3e-3

# spike: how far above its row the one huge logit sits (times `scale`).
SPIKE = 1e4


def seeds() -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=2**31 - 1)


def booleans() -> st.SearchStrategy[bool]:
    """False or True (a flag such as causal changes the program); in dev, as `few`."""
    return few(False, True)


def dtypes(*names: str) -> st.SearchStrategy[str]:
    """One of the dtypes (a kernel compiles once per dtype); in dev, as `few`."""
    return few(*(names or DTYPES))


def few(*cases):
    """Draw from an explicit short list (each distinct shape costs a compile).

    In the dev profile, a test with explicit examples draws only the cases they use, with
    new seeds, the draws of one generated example following one explicit example
    (profiles.py); the other profiles draw from every case.
    """
    strategy = _few(cases)
    setattr(strategy, profiles.OPTIONS_ATTRIBUTE, cases)  # which argument draws it: profiles.drawing_for
    return strategy


# Which explicit example a dev draw follows: one value shared by every `few` draw of one
# generated example, so its shapes are those of one explicit example (hypothesis's st.shared).
_FOLLOWED_EXAMPLE = st.shared(st.integers(0, 2 ** 16), key="tpucourse-followed-example")


@st.composite
def _few(draw, cases):
    example = draw(_FOLLOWED_EXAMPLE) if profiles.follows_examples() else None
    return draw(st.sampled_from(profiles.options_to_draw(cases, example)))


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


DIM_KINDS = ("below", "equal", "above", "ragged")


def dims_around(block: int, *, tile: int = 1) -> dict[str, int]:
    """One dimension's sizes relative to its block, each a case a blocked kernel must handle.

    below: half a block (rounded to `tile`): the block must shrink to the dimension, and
    a grid extent taken before that (`m // block` = 0) runs nothing; equal: one block;
    above: three blocks; ragged: two blocks and one tile, so the last block is partial
    and a grid floored with `//` drops it. Every size stays a multiple of `tile`, so the
    block shapes remain legal.

        dims_around(128, tile=8) == {"below": 64, "equal": 128, "above": 384, "ragged": 264}
    """
    if block < 1 or tile < 1 or block % tile:
        raise ValueError(f"block {block} must be a positive multiple of tile {tile}")
    return {"below": max(tile, block // 2 // tile * tile), "equal": block, "above": 3 * block,
            "ragged": 2 * block + tile}


def unequal_blocks(names, sizes) -> list[dict[str, int]]:
    """Block-size keyword sets whose members all differ: every cyclic rotation of `sizes`.

    Each name takes each size once, so a kernel that uses one block size where another
    belongs (a BlockSpec's (bn, bk) for (bk, bn), a mask's row offset in kv blocks, a
    grid extent over the wrong block) meets a set where the two differ.

        unequal_blocks(("block_q", "block_kv"), (256, 128))
            == [{"block_q": 256, "block_kv": 128}, {"block_q": 128, "block_kv": 256}]
    """
    names, sizes = tuple(names), tuple(sizes)
    if len(names) != len(sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(f"give one distinct size per name, got {names} and {sizes}")
    return [dict(zip(names, sizes[i:] + sizes[:i])) for i in range(len(sizes))]


def random_array(shape, dtype, seed: int, *, scale: float = 1.0, offset: float = 0.0,
                 kind: str = "normal"):
    """A jax array rounded to `dtype`, with values of the given kind.

    normal: normal(offset, scale); large: normal scaled by 1e4 (softmax
    stability); tiny: normal scaled by 1e-30 (underflow in products);
    equal_rows: every entry of a row equal (softmax must be uniform); masked:
    about a quarter of the entries -inf (attention masks); fully_masked_rows:
    as masked, plus whole rows of -inf; low_variance: every row spread by
    3e-3·scale around `offset`, a variance of about 1e-5·scale², comparable to a
    layer norm's eps (eps outside the square root, or left out, is off by tens of
    percent there and invisible elsewhere); spike: normal rows, each with one
    entry raised by 1e4·scale (one huge logit among ordinary ones).
    """
    import jax.numpy as jnp

    shape = tuple(int(n) for n in shape)
    if kind not in VALUE_KINDS:
        raise ValueError(f"value kind must be one of {VALUE_KINDS}, got {kind!r}")
    values = _drawn.values(shape, int(seed), float(scale), float(offset), kind)
    array = jnp.array(values, dtype=_jnp_dtype(dtype), copy=True)  # never the kept values' memory
    reproduction.built(array, reproduction.Recipe(shape, np.dtype(array.dtype).name, int(seed), kind,
                                                  float(scale), float(offset)))
    return array


class _DrawnValues:
    """random_array's float32 values, drawn once per process for each recipe and kept read-only,
    the most recently used first, up to KEPT_BYTES. A test's inputs are the same each run, and a
    warm process (learner/served_runs.py) runs them again and again: drawing a large input was a
    good part of an edited kernel's run."""

    KEPT_BYTES = 256 * 2**20
    LARGEST_KEPT = 32 * 2**20

    def __init__(self):
        import collections
        import threading

        self.kept: collections.OrderedDict = collections.OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def values(self, *recipe) -> np.ndarray:
        with self.lock:
            if recipe in self.kept:
                self.kept.move_to_end(recipe)
                return self.kept[recipe]
        values = np.asarray(_draw(*recipe))  # an array for a shape of () too, not NumPy's scalar
        values.flags.writeable = False
        if values.nbytes <= self.LARGEST_KEPT:
            with self.lock:
                if recipe not in self.kept:
                    self.kept[recipe] = values
                    self.bytes += values.nbytes
                while self.bytes > self.KEPT_BYTES:
                    _, dropped = self.kept.popitem(last=False)
                    self.bytes -= dropped.nbytes
        return values


_drawn = _DrawnValues()


def _draw(shape: tuple, seed: int, scale: float, offset: float, kind: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
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
    elif kind == "low_variance":
        values = (rng.standard_normal(shape) * LOW_VARIANCE_STD * scale + offset).astype(np.float32)
    elif kind == "spike":
        if len(shape) >= 1 and shape[-1]:
            rows = values.reshape(-1, shape[-1])
            rows[np.arange(len(rows)), rng.integers(0, shape[-1], len(rows))] += np.float32(SPIKE * scale)
            values = rows.reshape(shape)
    return values


def timed_input(shape, dtype, seed: int):
    """A gate's timed input: normal(0, 1) values drawn where the chip is, rounded to `dtype`, by
    jax.random with the "rbg" generator (XLA's RngBitGenerator: the device's own, the same values
    for a seed on one backend, others on another). A gate draws dozens of arrays of millions of
    entries (gate 03's slots, 16 a slot): numpy takes about half a second for each on a TPU host,
    and with JAX's default threefry the first draw at one 2x16x4096x128 shape took 18.7 s on a v5e
    (a gate 03 slot, 2026-12-06: its trace, compile and run); with this generator a whole gate 03
    slot, inputs and all, took 6.3-13.9 s (commit 9d5589b). Any non-negative int is a seed."""
    import jax

    key = jax.random.fold_in(jax.random.key(int(seed) % 2 ** 31, impl="rbg"), int(seed) // 2 ** 31)
    return _timed_normal(tuple(shape), np.dtype(_jnp_dtype(dtype)).name)(key)


@functools.cache
def _timed_normal(shape: tuple, dtype: str):
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda key: jax.random.normal(key, shape, jnp.float32).astype(dtype))


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

    def arrays(self, seed: int, kind: str = "normal"):
        """(q, k, v) with q (B, H, Sq, D), k and v (B, Hkv, Skv, D).

        kind (ATTENTION_KINDS), what the scores q kᵀ / sqrt(D) look like:
          normal: q, k, v standard normal (scores of about ±1);
          huge_logits: q scaled by 1000, scores of about ±1e4: exp overflows unless
            every block is shifted by the running max, which moves between kv blocks;
          negative_first_key: every query scores key 0 at about -1e4 (the others stay
            ordinary). Under a causal mask key 0 is row 0's only key, so a running max
            started at 0 instead of -inf leaves that row's sum at exp(-1e4) = 0.
        """
        q_shape = (self.batch, self.heads, self.q_len, self.head_dim)
        kv_shape = (self.batch, self.kv_heads, self.kv_len, self.head_dim)
        if kind == "normal":
            q = random_array(q_shape, self.dtype, seed)
        elif kind == "huge_logits":
            q = random_array(q_shape, self.dtype, seed, scale=1000.0)
        elif kind == "negative_first_key":
            # Every query leans along one direction u per kv head; key 0 points against
            # it, so q·k0 = -beta·(|u|² + 0.5·n·u) with |u|² ≈ D ± sqrt(2D) and 0.5·n·u of
            # about ±sqrt(D)/2: negative for every row, about -1e4 after the 1/sqrt(D) scale.
            rng = np.random.default_rng(seed)
            u = rng.standard_normal((self.batch, self.kv_heads, 1, self.head_dim))
            u_q = np.repeat(u, self.group, axis=1)
            q = jnp_asarray(u_q + 0.5 * rng.standard_normal(q_shape), self.dtype)
        else:
            raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        k = random_array(kv_shape, self.dtype, seed + 1)
        v = random_array(kv_shape, self.dtype, seed + 2)
        if kind == "negative_first_key":
            beta = 1e4 / np.sqrt(self.head_dim)
            keys = np.asarray(k, np.float32).copy()
            keys[:, :, 0, :] = -beta * u[:, :, 0, :]
            k = jnp_asarray(keys, self.dtype)
        return q, k, v

    def __str__(self) -> str:
        return (f"batch {self.batch}, heads {self.heads}/{self.kv_heads} kv, q_len {self.q_len}, "
                f"kv_len {self.kv_len}, head_dim {self.head_dim}, "
                f"{'causal' if self.causal else 'non-causal'}, {self.dtype}")


def attention_configs(*bases: AttentionConfig, dtypes=DTYPES) -> st.SearchStrategy[AttentionConfig]:
    """One of the base shapes, causal or not, in one of the dtypes: each a program of its own.

    A `few` over every combination, so that in dev a test with explicit examples draws
    exactly the configurations they use (causal and dtype included), with new seeds.
    """
    return few(*(dataclasses.replace(base, causal=causal, dtype=dtype)
                 for base in bases for causal in (False, True) for dtype in dtypes))


def jnp_asarray(values, dtype):
    """A jax array of `values` rounded to `dtype`."""
    import jax.numpy as jnp

    return jnp.asarray(np.asarray(values, np.float32), dtype=_jnp_dtype(dtype))


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
