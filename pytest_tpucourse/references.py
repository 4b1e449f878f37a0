"""The course's XLA floors and float64 oracles for the ops several chapters grade.

Each op is written once, generic in precision:
  - `oracle(...)`: run on float64 inputs under `jax.enable_x64`, every product
    and sum in float64: the ground truth a graded result is measured against;
  - `floor(...)`: the plain XLA implementation at the course's precision
    contract (inputs and output in the storage dtype, f32 accumulation, softmax
    in f32, probabilities rounded to the storage dtype before P·V, as flash
    kernels feed the MXU). It is what a kernel must beat on speed, and its own
    error sets the scale of the tolerance rule (see checks.py).

Causal masks are aligned top-left: query i sees keys 0..i, whatever the two
lengths (the convention of jax.experimental.pallas.ops.tpu.flash_attention).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

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
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=accumulate,
                   precision=HIGHEST) * scale
    allowed = jnp.ones(s.shape, bool) if mask is None else jnp.broadcast_to(mask, s.shape)
    if causal:
        allowed = allowed & (jnp.arange(sq)[:, None] >= jnp.arange(skv)[None, :])
    p = safe_softmax(jnp.where(allowed, s, -jnp.inf), axis=-1)
    if probabilities_dtype is not None:
        p = p.astype(probabilities_dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v.astype(p.dtype), preferred_element_type=accumulate,
                     precision=HIGHEST)
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
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=accumulate,
                   precision=HIGHEST) * scale
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


def sliding_window_attention_floor(q, k, v, *, window: int, scale: float | None = None):
    mask = sliding_window_mask(q.shape[2], k.shape[2], window)
    return (attention_floor(q, k, v, mask, scale=scale),
            attention_logsumexp(q, k, mask, scale=scale))


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
