"""Decode any dot_general: read its dimension numbers out of StableHLO, rebuild it as an einsum.

Reading. One op in StableHLO's pretty form reads

  %0 = stablehlo.dot_general %arg0, %arg1, batching_dims = [0] x [1],
       contracting_dims = [2, 3] x [2, 0], precision = [DEFAULT, DEFAULT]
       : (tensor<2x3x4x6xf32>, tensor<6x2x4x5xf32>) -> tensor<2x3x5xf32>

(on one line). `batching_dims` is omitted when there are none; `contracting_dims`
is always printed, possibly `[] x []` (an outer product). The operand and result
types carry the shapes: `tensor<2x3xf32>` is (2, 3), `tensor<f32>` a scalar.

Rebuilding. lax.dot_general(lhs, rhs, ((lhs_contracting, rhs_contracting),
(lhs_batch, rhs_batch))) pairs lhs_batch[i] with rhs_batch[i] and
lhs_contracting[i] with rhs_contracting[i]; every other dimension is free. Its
result is laid out as

    (batch dims, in lhs_batch order) + (lhs free dims, in order) + (rhs free dims, in order)

So: give each lhs dimension a letter, give each paired rhs dimension its
partner's letter and each rhs free dimension a new one, and write the output as
batch letters, then lhs free letters, then rhs free letters.
"""

import re
import string

_OP = re.compile(r"stablehlo\.dot_general\b(?P<attrs>[^:]*):\s*\((?P<lhs>tensor<[^>]*>),\s*"
                 r"(?P<rhs>tensor<[^>]*>)\)\s*->\s*(?P<out>tensor<[^>]*>)")
_DIMS = r"{name}\s*=\s*\[(?P<lhs>[^\]]*)\]\s*x\s*\[(?P<rhs>[^\]]*)\]"


def parse_dot_generals(text: str) -> list[dict]:
    """Every stablehlo.dot_general in `text`, in order, as a dict of dimension numbers and shapes.

    Keys: lhs_batch, rhs_batch, lhs_contracting, rhs_contracting (tuples of ints, in the
    order printed), lhs_shape, rhs_shape, out_shape (tuples of ints).
    """
    found = []
    for match in _OP.finditer(text):
        attrs = match["attrs"]
        lhs_batch, rhs_batch = _pair(attrs, "batching_dims")
        lhs_contracting, rhs_contracting = _pair(attrs, "contracting_dims")
        found.append(dict(
            lhs_batch=lhs_batch, rhs_batch=rhs_batch,
            lhs_contracting=lhs_contracting, rhs_contracting=rhs_contracting,
            lhs_shape=_shape(match["lhs"]), rhs_shape=_shape(match["rhs"]),
            out_shape=_shape(match["out"]),
        ))
    return found


def _pair(attrs: str, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    match = re.search(_DIMS.format(name=name), attrs)
    if match is None:
        return (), ()
    return _ints(match["lhs"]), _ints(match["rhs"])


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",") if t.strip())


def _shape(tensor_type: str) -> tuple[int, ...]:
    """tensor<2x3x4xf32> -> (2, 3, 4); tensor<f32> -> ()."""
    body = tensor_type[len("tensor<"):-1]
    return tuple(int(d) for d in body.split("x")[:-1])


def dot_general_to_einsum(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
    """The jnp.einsum spec equal to lax.dot_general(lhs, rhs, dimension_numbers)."""
    (lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch) = dimension_numbers
    letters = iter(string.ascii_letters)
    lhs = [next(letters) for _ in range(lhs_ndim)]
    rhs = [None] * rhs_ndim
    for l, r in zip(lhs_batch, rhs_batch):
        rhs[r] = lhs[l]
    for l, r in zip(lhs_contracting, rhs_contracting):
        rhs[r] = lhs[l]
    rhs = [c if c is not None else next(letters) for c in rhs]
    paired_lhs = set(lhs_batch) | set(lhs_contracting)
    paired_rhs = set(rhs_batch) | set(rhs_contracting)
    out = ([lhs[d] for d in lhs_batch]
           + [c for d, c in enumerate(lhs) if d not in paired_lhs]
           + [c for d, c in enumerate(rhs) if d not in paired_rhs])
    return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"
