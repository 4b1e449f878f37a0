"""FLOPs of a traced program, from its dot_generals.

Every matmul-like op in a jaxpr is a `dot_general`. Its params hold
`dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))`.
Each output element is a dot product over the contracting dimensions: one
multiply and one add per contracted element, so

    flops(dot_general) = 2 * prod(output shape) * prod(lhs contracting sizes)

(2mkn for an (m, k) @ (k, n) matmul). Elementwise ops are ignored: on a TPU the
MXU does the dots and everything else is noise in the FLOP count. Dots inside
sub-programs (jit, custom_jvp, cond branches) count once per appearance.
"""

import math

from jax.extend import core as jex_core


def dot_flops(closed_jaxpr) -> int:
    """2 * prod(out dims) * prod(contracting dims), summed over every dot_general, nested ones too."""
    return _flops(closed_jaxpr.jaxpr)


def _flops(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
            lhs_shape = eqn.invars[0].aval.shape
            out_shape = eqn.outvars[0].aval.shape
            contracted = math.prod(lhs_shape[d] for d in lhs_contracting)
            total += 2 * math.prod(out_shape) * contracted
        for param in eqn.params.values():
            for value in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(value, jex_core.ClosedJaxpr):
                    total += _flops(value.jaxpr)
                elif isinstance(value, jex_core.Jaxpr):
                    total += _flops(value)
    return total
