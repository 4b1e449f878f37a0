"""Exercise ch02.flops: FLOPs a traced program executes, from its dot_generals.

For every equation whose primitive is dot_general (in the top-level jaxpr and in
every sub-jaxpr, as in primitives.py), add

    2 * prod(output shape) * prod(sizes of the lhs contracting dimensions)

eqn.params["dimension_numbers"] is ((lhs_contracting, rhs_contracting),
(lhs_batch, rhs_batch)); shapes are on eqn.invars[0].aval.shape and
eqn.outvars[0].aval.shape. Ignore every other primitive. Return an int.

Count what runs: a `scan` body runs eqn.params["length"] times; a `cond` runs one
of eqn.params["branches"], so count its most expensive branch; a `while` whose
cond_jaxpr or body_jaxpr holds a dot_general has no count known from the program:
raise a ValueError that says "while". A `pallas_call` runs its kernel body
(eqn.params["jaxpr"]) once per point of its grid, eqn.params["grid_mapping"].grid
(a tuple of ints): count the body prod(grid) times. Every other sub-jaxpr (jit,
custom_jvp, custom_vjp) runs once.
"""

from jax.extend import core as jex_core


def dot_flops(closed_jaxpr) -> int:
    """FLOPs the program's dot_generals execute: 2 * prod(out dims) * prod(contracting dims) each."""
    raise NotImplementedError("write dot_flops(): find the dot_general eqns, read dimension_numbers and avals")
