"""The course's XLA floors and float64 oracles for the ops several chapters grade.

Each op is written once, generic in precision:
  - `oracle(...)`: run on float64 inputs under `jax.enable_x64`, every product
    and sum in float64: the ground truth a graded result is measured against;
  - `floor(...)`: the plain XLA implementation at the course's precision
    contract (inputs and output in the storage dtype, f32 accumulation, softmax
    in f32, probabilities rounded to the storage dtype before P·V, as flash
    kernels feed the MXU). It is what a kernel must beat on speed, and its own
    error sets the scale of the tolerance rule (see checks.py).

One precision contract for every floor and every kernel: no floor names a matmul
precision; each runs at the precision in effect, as the learner's kernels do. That is
JAX's default (full f32 on a CPU; one bf16 pass per f32 product on a TPU, Mosaic and
XLA alike), except that a run whose kernels run natively on a TPU judges a graded call whose float
inputs are all float32, and its floor, under `jax.default_matmul_precision("highest")` (six
passes: f32 products to about 1e-7) and times gates at the default (docs/checking.md,
"Precision"). The oracles run in
float64 on the host's CPU (checks.py), where no precision setting applies.

Causal masks are aligned top-left: query i sees keys 0..i, whatever the two
lengths (the convention of jax.experimental.pallas.ops.tpu.flash_attention).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

__all__ = [
    "ACTIVATIONS", "ADD", "ALL_GATHER", "ALL_GATHER_MATMUL", "ATTENTION", "attention",
    "attention_floor", "attention_logsumexp", "attention_oracle", "ATTENTION_WITH_LSE", "banded_attention",
    "F32",
    "HIGHEST", "LAYERNORM", "MATMUL", "MATMUL_BIAS_ACT", "matmul_floor", "matmul_oracle",
    "PAIR_EXCHANGE", "PERMUTE", "REDUCE_SCATTER", "Reference", "RMSNORM", "SAFE_SOFTMAX",
    "safe_softmax", "sliding_window_attention_floor", "sliding_window_attention_oracle",
    "SLIDING_WINDOW_ATTENTION_WITH_LSE", "sliding_window_mask", "SOFTMAX", "SUM_LEADING_AXIS",
]


F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST


@dataclass(frozen=True)
class Reference:
    """An op's float64 oracle and its XLA floor, as the checker takes them."""

    name: str
    oracle: Callable
    floor: Callable

    def bind(self, **kwargs) -> "Reference":
        """The same op with some keyword arguments fixed (activation="gelu", causal=True)."""
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        return Reference(f"{self.name}({shown})", functools.partial(self.oracle, **kwargs),
                         functools.partial(self.floor, **kwargs))


def _in_f32(op):
    """The floor of an elementwise/row op: compute in f32, round once to the input dtype."""
    @functools.wraps(op)
    def floor(x, *rest, **kwargs):
        rest = [r.astype(F32) for r in rest]
        return op(x.astype(F32), *rest, **kwargs).astype(x.dtype)
    return floor


def _add(x, y):
    return x + y


def _softmax(x):
    return jax.nn.softmax(x, axis=-1)


def _layernorm(x, gamma, beta, *, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)  # biased, as torch and flax
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


ACTIVATIONS = {
    "relu": lambda z: jnp.maximum(z, 0),
    "gelu": lambda z: jax.nn.gelu(z, approximate=True),
    "identity": lambda z: z,
}


def matmul_floor(x, y):
    """x @ y with an f32 accumulator, rounded once to x's dtype."""
    return jnp.dot(x, y, preferred_element_type=F32).astype(x.dtype)


def matmul_oracle(x, y):
    return jnp.dot(x, y, precision=HIGHEST)


def _matmul_bias_act_floor(x, w, b, *, activation="relu"):
    z = jnp.dot(x, w, preferred_element_type=F32) + b.astype(F32)
    return ACTIVATIONS[activation](z).astype(x.dtype)


def _matmul_bias_act_oracle(x, w, b, *, activation="relu"):
    return ACTIVATIONS[activation](jnp.dot(x, w, precision=HIGHEST) + b)


def attention(q, k, v, mask=None, *, causal: bool = False, scale: float | None = None,
              probabilities_dtype=None, accumulate=F32):
    """softmax(q kᵀ · scale [masked]) v for q (B, H, Sq, D), k and v (B, Hkv, Skv, D).

    Grouped-query attention when Hkv divides H: q head h reads kv head h // (H // Hkv).
    mask: optional boolean, broadcastable to (B, H, Sq, Skv), True = may attend; a query
    row with no allowed key returns zeros.
    """
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"{h} query heads cannot share {hkv} kv heads")
    if scale is None:
        scale = d ** -0.5
    k = jnp.repeat(k, h // hkv, axis=1)
    v = jnp.repeat(v, h // hkv, axis=1)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=accumulate) * scale
    allowed = jnp.ones(s.shape, bool) if mask is None else jnp.broadcast_to(mask, s.shape)
    if causal:
        allowed = allowed & (jnp.arange(sq)[:, None] >= jnp.arange(skv)[None, :])
    p = safe_softmax(jnp.where(allowed, s, -jnp.inf), axis=-1)
    if probabilities_dtype is not None:
        p = p.astype(probabilities_dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(p.dtype), preferred_element_type=accumulate)
    return out.astype(q.dtype)


def attention_floor(q, k, v, mask=None, *, causal: bool = False, scale: float | None = None):
    return attention(q, k, v, mask, causal=causal, scale=scale, probabilities_dtype=v.dtype)


def attention_oracle(q, k, v, mask=None, *, causal: bool = False, scale: float | None = None):
    return attention(q, k, v, mask, causal=causal, scale=scale, accumulate=q.dtype)


def attention_logsumexp(q, k, mask=None, *, causal: bool = False, scale: float | None = None,
                        accumulate=F32):
    """logsumexp over keys of q kᵀ · scale (causal: keys 0..i), (B, H, Sq) in `accumulate`.

    The residual a flash forward saves for its backward: each row's max plus the log of
    its softmax normaliser. Rows whose keys are all masked give -inf.
    """
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    k = jnp.repeat(k, h // hkv, axis=1)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=accumulate) * scale
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    if causal:
        s = jnp.where(jnp.arange(sq)[:, None] >= jnp.arange(skv)[None, :], s, -jnp.inf)
    return jax.nn.logsumexp(s.astype(accumulate), axis=-1)


def _attention_with_lse_floor(q, k, v, *, causal: bool = False, scale: float | None = None):
    return (attention_floor(q, k, v, causal=causal, scale=scale),
            attention_logsumexp(q, k, causal=causal, scale=scale))


def _attention_with_lse_oracle(q, k, v, *, causal: bool = False, scale: float | None = None):
    return (attention_oracle(q, k, v, causal=causal, scale=scale),
            attention_logsumexp(q, k, causal=causal, scale=scale, accumulate=q.dtype))


def sliding_window_mask(q_len: int, kv_len: int, window: int):
    """(Sq, Skv) boolean: query r sees keys r - window < c <= r (local causal, top-left)."""
    rows, cols = jnp.arange(q_len)[:, None], jnp.arange(kv_len)[None, :]
    return (cols <= rows) & (cols > rows - window)


def _blocks(x, length: int, block: int, before: int):
    """x (B, H, S, D) as (B, H, n, block, D): `before` zero rows, then x cut or zero-padded to `length`."""
    x = x[:, :, :length]
    x = jnp.pad(x, ((0, 0), (0, 0), (before, length - x.shape[2]), (0, 0)))
    return x.reshape(*x.shape[:2], -1, block, x.shape[-1])


def banded_attention(q, k, v, *, window: int, scale: float | None = None, block_q: int | None = None,
                     probabilities_dtype=None):
    """Sliding-window attention as XLA runs it without a kernel: each block of queries against only
    the keys its window reaches, so O(Sq · (block_q + window)) scores, not Sq · Skv. (out, lse).

    Query block i (rows i·block_q ..) takes key blocks i - back .. i, back = ceil((window - 1) /
    block_q); with block_q = window (the default) each query block meets two windows of keys.
    Masks as sliding_window_mask; a row that sees no key gives zeros and lse -inf.
    """
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"{h} query heads cannot share {hkv} kv heads")
    scale = d ** -0.5 if scale is None else scale
    block = max(1, min(block_q or window, sq))
    n = -(-sq // block)  # query blocks
    back = -(-(window - 1) // block)  # earlier key blocks a query block's window reaches
    k, v = jnp.repeat(k, h // hkv, axis=1), jnp.repeat(v, h // hkv, axis=1)
    qb = _blocks(q, n * block, block, 0)  # (B, H, n, block, D)
    kb, vb = (_blocks(x, n * block, block, back * block) for x in (k, v))  # (B, H, back + n, block, D)
    # Query block i's keys: key blocks i .. i + back of the padded keys, side by side.
    band = lambda x: jnp.concatenate([x[:, :, j:j + n] for j in range(back + 1)], axis=3)
    kw, vw = band(kb), band(vb)  # (B, H, n, (back + 1) block, D)
    s = jnp.einsum("bhnqd,bhnkd->bhnqk", qb, kw, preferred_element_type=F32) * scale
    rows = (jnp.arange(n)[:, None, None] * block + jnp.arange(block)[None, :, None])
    cols = (jnp.arange(n)[:, None, None] - back) * block + jnp.arange((back + 1) * block)[None, None, :]
    allowed = (cols <= rows) & (cols > rows - window) & (cols >= 0) & (cols < skv)
    s = jnp.where(allowed, s, -jnp.inf)
    p = safe_softmax(s, axis=-1)
    if probabilities_dtype is not None:
        p = p.astype(probabilities_dtype)
    out = jnp.einsum("bhnqk,bhnkd->bhnqd", p, vw.astype(p.dtype), preferred_element_type=F32)
    lse = jax.nn.logsumexp(s, axis=-1)
    return (out.astype(q.dtype).reshape(b, h, n * block, d)[:, :, :sq],
            lse.reshape(b, h, n * block)[:, :, :sq])


def sliding_window_attention_floor(q, k, v, *, window: int, scale: float | None = None):
    """The XLA floor of sliding-window attention: the banded formulation (`banded_attention`), the
    honest XLA program for local attention; dense attention under a window mask would compute
    Sq · Skv scores for Sq · window pairs."""
    return banded_attention(q, k, v, window=window, scale=scale, probabilities_dtype=v.dtype)


def sliding_window_attention_oracle(q, k, v, *, window: int, scale: float | None = None):
    mask = sliding_window_mask(q.shape[2], k.shape[2], window)
    return (attention_oracle(q, k, v, mask, scale=scale),
            attention_logsumexp(q, k, mask, scale=scale, accumulate=q.dtype))


ADD = Reference("add", _add, _in_f32(_add))
SOFTMAX = Reference("softmax", _softmax, _in_f32(_softmax))
LAYERNORM = Reference("layernorm", _layernorm, _in_f32(_layernorm))
MATMUL = Reference("matmul", matmul_oracle, matmul_floor)
MATMUL_BIAS_ACT = Reference("matmul_bias_act", _matmul_bias_act_oracle, _matmul_bias_act_floor)
ATTENTION = Reference("attention", attention_oracle, attention_floor)
# (out, lse): a flash forward's output and the logsumexp residual it saves (float32).
ATTENTION_WITH_LSE = Reference("attention with logsumexp", _attention_with_lse_oracle,
                               _attention_with_lse_floor)


# (out, lse) of sliding-window attention: each query sees its own key and the window - 1 before.
SLIDING_WINDOW_ATTENTION_WITH_LSE = Reference(
    "sliding-window attention with logsumexp", sliding_window_attention_oracle,
    sliding_window_attention_floor)


# ---------------------------------------------------------------- chapter 1's ops
# Softmax over any axis with -inf entries allowed; a slice that is entirely -inf
# (a fully masked row) is defined as all zeros, not NaN. RMS norm. Attention with
# an optional boolean mask (True = may attend), fully masked rows giving zeros.


def safe_softmax(x, *, axis=-1):
    """softmax over `axis`; -inf entries get probability 0; an all -inf slice is all zeros."""
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))  # softmax is shift-invariant
    e = jnp.exp(x - m)
    total = jnp.sum(e, axis=axis, keepdims=True)
    return e / jnp.where(total == 0, 1, total)


def _rmsnorm(x, gamma, *, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * gamma


SAFE_SOFTMAX = Reference("safe_softmax", safe_softmax, _in_f32(safe_softmax))
RMSNORM = Reference("rmsnorm", _rmsnorm, _in_f32(_rmsnorm))


def _sum_leading_axis(x):
    return jnp.sum(x, axis=0)


def _sum_leading_axis_floor(x):
    return jnp.sum(x.astype(F32), axis=0)


# A reduction whose result is float32 whatever the input dtype (an f32 accumulator).
SUM_LEADING_AXIS = Reference("sum over the leading axis, in f32", _sum_leading_axis,
                             _sum_leading_axis_floor)


# The collectives chapter 14 grades.
#
# Float64 oracles and XLA floors of the collectives chapter 14 grades.
#
# Each is a `references.Reference` whose keyword arguments are the mesh and its axis
# (bind them: `PERMUTE.bind(mesh=m, axis_name="x", shift=1)`). The oracle computes the
# collective's result on the whole array, in float64, on one device; the floor is
# XLA's own collective (lax.ppermute, lax.all_gather, lax.psum_scatter) inside a
# shard_map over the same mesh, at the course's precision contract (sums and matmuls
# accumulated in float32, rounded once). Arrays are split along axis 0 over the
# ring (the all-gather matmul's w and result along axis 1).

def _ring_size(mesh, axis_name) -> int:
    return mesh.shape[axis_name]


def _on_ring(per_device, mesh, axis_name, in_specs=None, out_specs=None):
    spec = jax.P(axis_name)
    return jax.shard_map(per_device, mesh=mesh, in_specs=in_specs or spec,
                         out_specs=spec if out_specs is None else out_specs, check_vma=False)


def _permute_oracle(x, *, mesh, axis_name, shift):
    return jnp.roll(x, shift * (x.shape[0] // _ring_size(mesh, axis_name)), axis=0)


def _permute_floor(x, *, mesh, axis_name, shift):
    n = _ring_size(mesh, axis_name)
    pairs = [(i, (i + shift) % n) for i in range(n)]
    return _on_ring(lambda shard: jax.lax.ppermute(shard, axis_name, pairs), mesh, axis_name)(x)


def _exchange_oracle(x, *, mesh, axis_name):
    n = _ring_size(mesh, axis_name)
    shards = x.reshape(n, x.shape[0] // n, *x.shape[1:])
    return shards[jnp.array([i ^ 1 for i in range(n)])].reshape(x.shape)  # shard i from device i ^ 1


def _exchange_floor(x, *, mesh, axis_name):
    pairs = [(i, i ^ 1) for i in range(_ring_size(mesh, axis_name))]
    return _on_ring(lambda shard: jax.lax.ppermute(shard, axis_name, pairs), mesh, axis_name)(x)


def _all_gather_oracle(x, *, mesh, axis_name):
    return x  # every device ends with all of x


def _all_gather_floor(x, *, mesh, axis_name):
    return _on_ring(lambda shard: jax.lax.all_gather(shard, axis_name, tiled=True), mesh, axis_name,
                    out_specs=jax.P())(x)


def _reduce_scatter_oracle(x, *, mesh, axis_name):
    n = _ring_size(mesh, axis_name)
    shards = x.reshape(n, n, x.shape[0] // (n * n), *x.shape[1:])  # (device, chunk, rows, ...)
    return shards.sum(axis=0).reshape(x.shape[0] // n, *x.shape[1:])


def _reduce_scatter_floor(x, *, mesh, axis_name):
    def per_device(shard):
        return jax.lax.psum_scatter(shard.astype(jnp.float32), axis_name, scatter_dimension=0,
                                tiled=True).astype(x.dtype)
    return _on_ring(per_device, mesh, axis_name)(x)


def _all_gather_matmul_oracle(x, w, *, mesh, axis_name):
    return matmul_oracle(x, w)


def _all_gather_matmul_floor(x, w, *, mesh, axis_name):
    """Gather first, multiply after: XLA's all-gather, then its matmul of the gathered x."""
    def per_device(x_shard, w_shard):
        return matmul_floor(jax.lax.all_gather(x_shard, axis_name, tiled=True), w_shard)
    return _on_ring(per_device, mesh, axis_name, in_specs=(jax.P(axis_name), jax.P(None, axis_name)),
                    out_specs=jax.P(None, axis_name))(x, w)


PERMUTE = Reference("ring permute (jax.lax.ppermute)", _permute_oracle, _permute_floor)
PAIR_EXCHANGE = Reference("pair exchange (jax.lax.ppermute with pairs i, i ^ 1)", _exchange_oracle,
                          _exchange_floor)
ALL_GATHER = Reference("all-gather (jax.lax.all_gather)", _all_gather_oracle, _all_gather_floor)
REDUCE_SCATTER = Reference("reduce-scatter (jax.lax.psum_scatter)", _reduce_scatter_oracle,
                           _reduce_scatter_floor)
ALL_GATHER_MATMUL = Reference("all-gather matmul", _all_gather_matmul_oracle, _all_gather_matmul_floor)
