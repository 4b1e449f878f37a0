"""Roofline floors: the least time an op can take on a chip.

    floor = max(FLOPs / peak FLOP/s, HBM bytes / HBM bandwidth)

The larger term names the bound (compute or memory). Arithmetic intensity is
FLOPs per HBM byte; the chip's ridge point is peak / bandwidth, the intensity
above which an op is compute-bound. HBM bytes count each operand read once and
the result written once: the best any schedule can do. The peak is the chip's
rate for the op's dtype (bf16 unless told): a dtype the chip publishes no rate
for is refused rather than given the bf16 peak.

FLOPs and bytes come from analytic counts (`matmul_cost`, `elementwise_cost`),
from a marker's arguments, or from `pl.estimate_cost` of the floor implementation.
Not from the CPU's compiled cost analysis: the CPU upcasts bf16, which inflates
the bytes. NumPy is imported where it is used: the plugin reads roofline markers at
load time without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .chips import Chip

__all__ = [
    "attention_cost", "compute_bound_rows", "Cost", "elementwise_cost", "estimated_cost", "itemsize",
    "LAYERNORM_FLOPS_PER_ELEMENT", "marker_cost", "matmul_bias_act_cost", "matmul_cost",
    "op_cost", "operand_cost", "OPS", "parse_shape", "predict", "Prediction", "row_op_cost",
    "SOFTMAX_FLOPS_PER_ELEMENT",
]


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float

    def __post_init__(self):
        import numpy as np

        for what in ("flops", "bytes"):
            value = getattr(self, what)
            if not (isinstance(value, (int, float, np.integer, np.floating)) and value >= 0
                    and math.isfinite(value)):
                raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
        if self.flops == 0 and self.bytes == 0:
            raise ValueError("an op with 0 FLOPs and 0 bytes has no floor")


@dataclass(frozen=True)
class Prediction:
    chip: str
    flops: float
    bytes: float
    compute_seconds: float
    memory_seconds: float
    ridge: float

    @property
    def floor_seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_seconds >= self.memory_seconds else "memory"

    @property
    def intensity(self) -> float:
        """FLOPs per HBM byte."""
        return self.flops / self.bytes if self.bytes else math.inf

    def lines(self) -> list[str]:
        return [
            f"chip        {self.chip}",
            f"FLOPs       {self.flops:,.0f}",
            f"HBM bytes   {self.bytes:,.0f}",
            f"compute     {self.compute_seconds * 1e6:.1f} us",
            f"memory      {self.memory_seconds * 1e6:.1f} us",
            f"floor       {self.floor_seconds * 1e6:.1f} us ({self.bound}-bound)",
            f"intensity   {self.intensity:.1f} FLOP/byte",
            f"ridge       {self.ridge:.1f} FLOP/byte "
            f"({'above' if self.intensity >= self.ridge else 'below'} it: {self.bound}-bound)",
        ]


def predict(chip: Chip, cost: Cost, dtype="bfloat16") -> Prediction:
    """The floor of `cost` on `chip` at its peak for `dtype` (ValueError where none is published)."""
    peak = chip.peak_for(dtype)
    return Prediction(
        chip=chip.name, flops=float(cost.flops), bytes=float(cost.bytes),
        compute_seconds=cost.flops / peak,
        memory_seconds=cost.bytes / chip.hbm_bandwidth,
        ridge=peak / chip.hbm_bandwidth,
    )


def itemsize(dtype) -> int:
    import numpy as np

    try:
        return np.dtype(_numpy_dtype(dtype)).itemsize
    except TypeError:
        raise ValueError(f"unknown dtype {dtype!r}") from None


def matmul_cost(m: int, k: int, n: int, dtype) -> Cost:
    """(m, k) @ (k, n): 2mkn FLOPs; x, y read once and the output written once."""
    _positive(m=m, k=k, n=n)
    return Cost(flops=2 * m * k * n, bytes=(m * k + k * n + m * n) * itemsize(dtype))


def compute_bound_rows(k: int, n: int, *, itemsize: int, peak_flops: float, hbm_bandwidth: float) -> int | None:
    """The fewest rows m for which an (m, k) @ (k, n) matmul is compute-bound (its compute time at
    least its memory time, a tie counting as compute), or None where no m is: the roofline used
    for a decision, before any kernel exists.

    Compute-bound means 2mkn / peak >= itemsize (mk + kn + mn) / bandwidth, that is
    m (2kn / peak - itemsize (k + n) / bandwidth) >= itemsize kn / bandwidth. Where the bracket
    is not positive (intensity tends to 2kn / (itemsize (k + n)) as m grows, and that is not
    above the ridge) no m will do. Solved in exact fractions: a float at the boundary would
    answer one row off.
    """
    from fractions import Fraction

    _positive(k=k, n=n, itemsize=itemsize)
    peak, bandwidth = Fraction(peak_flops), Fraction(hbm_bandwidth)
    per_row = 2 * k * n / peak - itemsize * (k + n) / bandwidth
    if per_row <= 0:
        return None
    return max(1, math.ceil(itemsize * k * n / bandwidth / per_row))


def elementwise_cost(shape, dtype, *, inputs: int = 2) -> Cost:
    """One FLOP per output element; every input read once, the output written once."""
    _positive(**{f"dim{i}": d for i, d in enumerate(shape)})
    size = math.prod(shape)
    return Cost(flops=size * (inputs - 1 if inputs > 1 else 1), bytes=(inputs + 1) * size * itemsize(dtype))


def attention_cost(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int, dtype, *,
                   kv_heads: int | None = None, causal: bool = False,
                   backward: bool = False, window: int | None = None) -> Cost:
    """Flash attention's FLOPs and HBM bytes (the score matrix never reaches HBM).

    Forward: two matmuls (q kᵀ and P v), 4·D FLOPs per (query, key) pair computed; causal
    counts only the allowed pairs (top-left: query i sees keys 0..i), so a square causal
    problem costs (S + 1) / (2S) of the full one. Bytes: q, k, v read once, o written once.
    backward=True adds the backward's five matmuls (S recomputed, dV, dP, dQ, dK: 2.5x the
    forward's FLOPs), reading q, k, v, o, dO and writing dq, dk, dv. window: sliding-window
    attention, query i sees keys i - window + 1..i, min(i + 1, window) pairs (causal implied).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    _positive(batch=batch, heads=heads, kv_heads=kv_heads, q_len=q_len, kv_len=kv_len,
              head_dim=head_dim)
    if window is not None:
        pairs = sum(min(i + 1, kv_len, window) for i in range(q_len))
    elif causal:
        pairs = sum(min(i + 1, kv_len) for i in range(q_len))
    else:
        pairs = q_len * kv_len
    flops = 4 * head_dim * pairs * batch * heads
    q_elems = batch * heads * q_len * head_dim
    kv_elems = batch * kv_heads * kv_len * head_dim
    nbytes = (2 * q_elems + 2 * kv_elems) * itemsize(dtype)
    if backward:
        flops += 10 * head_dim * pairs * batch * heads
        nbytes += (4 * q_elems + 4 * kv_elems) * itemsize(dtype)  # q, o, dO, dq; k, v, dk, dv
    return Cost(flops=flops, bytes=nbytes)


# FLOPs per element of the row ops, one per arithmetic step (exp and rsqrt count as one):
# softmax: max, subtract, exp, sum, divide; layernorm: the mean's sum, subtract, square,
# the variance's sum, scale by rsqrt, gamma, beta. Both are memory-bound on every chip in
# the registry, so these counts move no floor.
SOFTMAX_FLOPS_PER_ELEMENT = 5
LAYERNORM_FLOPS_PER_ELEMENT = 7


def row_op_cost(m: int, n: int, dtype, *, flops_per_element: int, row_params: int = 0) -> Cost:
    """An op over the rows of an (m, n) array: x read once, the result written once, and
    `row_params` vectors of length n (layernorm's gamma and beta) read once."""
    _positive(m=m, n=n)
    return Cost(flops=flops_per_element * m * n, bytes=(2 * m * n + row_params * n) * itemsize(dtype))


def matmul_bias_act_cost(m: int, k: int, n: int, dtype) -> Cost:
    """act(x @ w + b) fused: the matmul's 2mkn FLOPs plus one for the bias and one for the
    activation per output element; x, w and b read once, the output written once."""
    _positive(m=m, k=k, n=n)
    return Cost(flops=2 * m * k * n + 2 * m * n, bytes=(m * k + k * n + n + m * n) * itemsize(dtype))


def _attention_op(causal: bool, backward: bool):
    def cost(shape, dtype):
        batch, heads, q_len, kv_len, head_dim = shape
        return attention_cost(batch, heads, q_len, kv_len, head_dim, dtype, causal=causal,
                              backward=backward)
    return cost


# The ops the command line knows: name -> (the --shape it takes, cost function). The
# attention names are the ops gate 03 records.
OPS = {
    "matmul": ("MxKxN", lambda s, dtype: matmul_cost(*s, dtype)),
    "add": ("MxN", lambda s, dtype: elementwise_cost(s, dtype, inputs=2)),
    "softmax": ("MxN", lambda s, dtype: row_op_cost(
        *s, dtype, flops_per_element=SOFTMAX_FLOPS_PER_ELEMENT)),
    "layernorm": ("MxN", lambda s, dtype: row_op_cost(
        *s, dtype, flops_per_element=LAYERNORM_FLOPS_PER_ELEMENT, row_params=2)),
    "matmul_bias_act": ("MxKxN", lambda s, dtype: matmul_bias_act_cost(*s, dtype)),
    "attention-fwd": ("BxHxSqxSkvxD", _attention_op(causal=False, backward=False)),
    "attention-causal-fwd": ("BxHxSqxSkvxD", _attention_op(causal=True, backward=False)),
    "attention-fwd-bwd": ("BxHxSqxSkvxD", _attention_op(causal=False, backward=True)),
    "attention-causal-fwd-bwd": ("BxHxSqxSkvxD", _attention_op(causal=True, backward=True)),
}


def op_cost(op: str, shape: tuple[int, ...], dtype) -> Cost:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    form, cost = OPS[op]
    ndim = len(form.split("x"))
    if len(shape) != ndim:
        raise ValueError(f"op {op} takes a {ndim}-dimensional shape ({form}), got "
                         f"{'x'.join(map(str, shape))}")
    return cost(shape, dtype)


def operand_cost(op: str, shapes, dtype) -> Cost | None:
    """The cost of a recorded op from its operands' shapes, for the ops the course counts."""
    if op in ("matmul", "matmul-skinny") and len(shapes) == 2 and shapes[0][1] == shapes[1][0]:
        return matmul_cost(shapes[0][0], shapes[0][1], shapes[1][1], dtype)
    if op == "add" and len(shapes) == 2 and shapes[0] == shapes[1]:
        return elementwise_cost(shapes[0], dtype, inputs=2)
    return None


def parse_shape(text: str) -> tuple[int, ...]:
    """'4096x4096x4096' -> (4096, 4096, 4096)."""
    try:
        shape = tuple(int(part) for part in text.lower().replace("×", "x").split("x"))
    except ValueError:
        raise ValueError(f"shape {text!r} is not of the form 4096x4096") from None
    _positive(**{f"dim{i}": d for i, d in enumerate(shape)})
    return shape


def estimated_cost(fn, *args, **kwargs) -> Cost:
    """FLOPs and HBM bytes of fn(*args) as JAX's Pallas cost estimator sees them.

    args may be arrays or jax.ShapeDtypeStruct; nothing is executed.
    """
    from jax.experimental import pallas as pl

    estimate = pl.estimate_cost(fn, *args, **kwargs)
    return Cost(flops=estimate.flops, bytes=estimate.bytes_accessed)


def marker_cost(mark) -> Cost | None:
    """The Cost a `@pytest.mark.roofline(flops=..., bytes=...)` gives, if it gives one."""
    flops, nbytes = mark.kwargs.get("flops"), mark.kwargs.get("bytes")
    if flops is None and nbytes is None:
        return None
    if flops is None or nbytes is None:
        raise ValueError("roofline marker: give both flops= and bytes=, or neither")
    return Cost(flops=flops, bytes=nbytes)


def _positive(**dims) -> None:
    import numpy as np

    for name, value in dims.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _numpy_dtype(dtype):
    import ml_dtypes

    name = str(dtype)
    if name in ("bfloat16", "bf16"):
        return ml_dtypes.bfloat16
    if hasattr(ml_dtypes, name):  # float8_e4m3fn, int4, ...
        return getattr(ml_dtypes, name)
    return dtype
