"""Decode HLO's dot syntax: every dot and every dot-as-convolution of a module as an einsum.

XLA:CPU (and the HLO of a lowered program) prints a contraction as a dot whose
dimension numbers are attributes; the shapes are those of the result and of the two
operands, instructions defined earlier in the same computation:

  %dot.1 = f32[4,8,16]{2,1,0} dot(%p0, %p1), lhs_batch_dims={0}, lhs_contracting_dims={2},
           rhs_batch_dims={0}, rhs_contracting_dims={1}

XLA:TPU prints it as a convolution, the MXU's own op, with one letter per dimension:

  %convolution-base-dilated.1 = f32[4,128,512]{...} convolution(%a, %b),
      window={size=4 stride=3 lhs_dilate=4}, dim_labels=b0f_0oi->0bf

lhs letters: b a free dimension (the convolution's "batch"), f the contracted one
(its "feature"); rhs: i contracted, o free; out: b and f are the lhs and rhs free
dimensions. A digit is a spatial dimension: here a batch dimension, the same digit on
every side. With window size B, lhs dilation B and stride B - 1, output position p
lines up lhs position p with rhs position p and nothing else, which is a batch.

The output of a dot is laid out batch, lhs free, rhs free; a convolution's follows
its out labels.
"""

import re
import string


def decode_hlo_dots(hlo: str) -> list[dict]:
    """Every dot and convolution in an HLO module, in text order, decoded."""
    shapes = {}  # (computation, instruction name) -> dims
    found, computation = [], None
    for line in hlo.splitlines():
        if head := re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line):
            computation = head.group(1)
            continue
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\(?[a-z]\w*\[([\d,]*)\])\S* ([\w\-]+)\((.*)", line)
        if m is None:
            continue
        name, _, dims, opcode, rest = m.groups()
        shapes[computation, name] = _dims(dims)
        if opcode in ("dot", "convolution"):
            operands = [o.split()[-1].lstrip("%") for o in _operands(rest)]
            lhs, rhs = shapes[computation, operands[0]], shapes[computation, operands[1]]
            found.append(_decode(name, opcode, rest, lhs, rhs, _dims(dims)))
    return found


def _decode(name, opcode, attributes, lhs_shape, rhs_shape, out_shape):
    if opcode == "dot":
        lb, rb, lc, rc = (_ints(re.search(rf"{key}_dims=\{{([\d,]*)\}}", attributes))
                          for key in ("lhs_batch", "rhs_batch", "lhs_contracting", "rhs_contracting"))
        out = ([("batch", k) for k in range(len(lb))] + ["lhs"] * (len(lhs_shape) - len(lb) - len(lc))
               + ["rhs"] * (len(rhs_shape) - len(rb) - len(rc)))
    else:
        lhs_l, rhs_l, out_l = re.search(r"dim_labels=([^_]+)_([^-]+)->(\w+)", attributes).groups()
        digits = sorted(c for c in lhs_l if c.isdigit())
        lb = tuple(lhs_l.index(d) for d in digits)
        rb = tuple(rhs_l.index(d) for d in digits)
        lc, rc = (lhs_l.index("f"),), (rhs_l.index("i"),)
        out = [("batch", digits.index(c)) if c.isdigit() else ("lhs" if c == "b" else "rhs") for c in out_l]
    letters = iter(string.ascii_letters)
    lhs = [next(letters) for _ in lhs_shape]
    rhs = [None] * len(rhs_shape)
    for l, r in zip(lb + lc, rb + rc):
        rhs[r] = lhs[l]
    rhs = [c or next(letters) for c in rhs]
    free = {"lhs": iter(c for d, c in enumerate(lhs) if d not in lb + lc),
            "rhs": iter(c for d, c in enumerate(rhs) if d not in rb + rc)}
    spec = "".join(lhs[lb[o[1]]] if isinstance(o, tuple) else next(free[o]) for o in out)
    return dict(name=name, lhs_shape=lhs_shape, rhs_shape=rhs_shape, out_shape=out_shape,
                lhs_batch=lb, rhs_batch=rb, lhs_contracting=lc, rhs_contracting=rc,
                einsum=f"{''.join(lhs)},{''.join(rhs)}->{spec}")


def _operands(rest):
    """The operand list of 'a, b), attrs...' : split at top-level commas up to the closing ')'."""
    depth, parts, start = 0, [], 0
    for i, c in enumerate(rest):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return parts + [rest[start:i]]
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(rest[start:i])
            start = i + 1
    return parts


def _dims(text):
    return tuple(int(d) for d in text.split(",") if d)


def _ints(match):
    return tuple(int(d) for d in match.group(1).split(",") if d) if match else ()
