"""FLOPs a traced program executes, from its dot_generals.

Every matmul-like op in a jaxpr is a `dot_general`. Its params hold
`dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`.
Each output element is a dot product over the contracting dimensions: one
multiply and one add per contracted element, so

    flops(dot_general) = 2 * prod(output shape) * prod(lhs contracting sizes)

(2mkn for an (m, k) @ (k, n) matmul). Elementwise ops are ignored: this counts
the MXU's work, the dots, which in a matmul-heavy program are nearly all of its
FLOPs (a softmax's elementwise FLOPs run on the vector units, chapter 10).

The count is what runs, not what is written: a `scan` body runs `length` times;
a `cond` runs one branch, so it costs its most expensive branch (an upper bound
when the branches differ); a `while_loop`'s trip count is a run-time value, so a
while loop whose body or condition holds a dot has no count and raises a
ValueError; a `pallas_call` runs its kernel body once per grid point, so the body
counts prod(grid) times (chapter 11's tiled matmul runs 2·bm·bk·bn FLOPs per step,
(M/bm)(N/bn)(K/bk) steps: 2MKN in all). Other sub-programs (jit, custom_jvp,
custom_vjp) run once.
"""

import math

from jax.extend import core as jex_core


def dot_flops(closed_jaxpr) -> int:
    """FLOPs the program's dot_generals execute: 2 * prod(out dims) * prod(contracting dims) each."""
    return _flops(closed_jaxpr.jaxpr)


def _flops(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        subs = [value.jaxpr if isinstance(value, jex_core.ClosedJaxpr) else value
                for param in eqn.params.values()
                for value in (param if isinstance(param, (tuple, list)) else (param,))
                if isinstance(value, (jex_core.ClosedJaxpr, jex_core.Jaxpr))]
        if name == "dot_general":
            (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            out_shape = eqn.outvars[0].aval.shape
            contracted = math.prod(lhs_shape[d] for d in lhs_contracting)
            total += 2 * math.prod(out_shape) * contracted
        elif name == "cond":  # its sub-jaxprs are its branches
            total += max(_flops(branch) for branch in subs)
        elif name == "scan":  # its one sub-jaxpr is the body
            total += eqn.params["length"] * _flops(subs[0])
        elif name == "pallas_call":  # its one sub-jaxpr is the kernel body, run at every grid point
            total += math.prod(eqn.params["grid_mapping"].grid) * _flops(subs[0])
        elif name == "while":  # cond_jaxpr and body_jaxpr
            if any(_flops(sub) for sub in subs):
                raise ValueError("a while_loop runs its dots a number of times known only when it "
                                 "runs: its FLOPs cannot be counted from the program")
        else:
            total += sum(_flops(sub) for sub in subs)
    return total
