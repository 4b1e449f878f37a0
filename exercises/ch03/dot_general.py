"""Exercise ch03.dot_general: decode any dot_general.

parse_dot_generals(text): find every `stablehlo.dot_general` in StableHLO text, in
order, and return one dict per op with keys
    lhs_batch, rhs_batch, lhs_contracting, rhs_contracting   tuples of ints, as printed
    lhs_shape, rhs_shape, out_shape                           tuples of ints
`batching_dims = [..] x [..]` is absent when there are no batch dims;
`contracting_dims = [..] x [..]` is always there, possibly `[] x []`;
`tensor<2x3xf32>` is the shape (2, 3), `tensor<f32>` the shape ().

dot_general_to_einsum(lhs_ndim, rhs_ndim, dimension_numbers): the jnp.einsum spec
("abc,acd->abd") that computes lax.dot_general(lhs, rhs, dimension_numbers), with
dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)) as
lax takes it. lax.dot_general's result is laid out as: batch dims (in lhs_batch
order), then lhs free dims, then rhs free dims, each in operand order.
"""

import re
import string


def parse_dot_generals(text: str) -> list[dict]:
    """Every stablehlo.dot_general in `text`, in order, as a dict of dimension numbers and shapes."""
    raise NotImplementedError("write parse_dot_generals(): a regex per attribute, and one for the types after ':'")


def dot_general_to_einsum(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
    """The jnp.einsum spec equal to lax.dot_general(lhs, rhs, dimension_numbers)."""
    raise NotImplementedError("write dot_general_to_einsum(): one letter per dim, paired dims share a letter")
