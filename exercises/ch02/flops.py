"""Exercise ch02.flops: FLOPs of a traced program, from its dot_generals.

For every equation whose primitive is dot_general (in the top-level jaxpr and in
every sub-jaxpr, as in primitives.py), add

    2 * prod(output shape) * prod(sizes of the lhs contracting dimensions)

eqn.params["dimension_numbers"] is ((lhs_contracting, rhs_contracting),
(lhs_batch, rhs_batch)); shapes are on eqn.invars[0].aval.shape and
eqn.outvars[0].aval.shape. Ignore every other primitive. Return an int.
"""

from jax.extend import core as jex_core


def dot_flops(closed_jaxpr) -> int:
    """2 * prod(out dims) * prod(contracting dims), summed over every dot_general, nested ones too."""
    raise NotImplementedError("write dot_flops(): find the dot_general eqns, read dimension_numbers and avals")
