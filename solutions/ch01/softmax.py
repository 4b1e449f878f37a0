"""Numerically stable softmax over any axis, with -inf masks and fully masked rows.

softmax is unchanged by subtracting a constant from every logit of a slice, so
subtract the slice's max: every exponent is then <= 0, exp never overflows, and
the largest term is exactly 1, so the sum is at least 1. Two cases need a
decision the formula does not make:

  - a slice that is entirely -inf (a fully masked row): its max is -inf, and
    x - max is -inf - (-inf) = NaN. We define the result as all zeros (nothing
    may be attended to, so nothing is), by shifting with 0 instead of a
    non-finite max and dividing by 1 instead of a zero sum;
  - bf16 / f16 inputs: the max, the exponentials and the sum are computed in
    f32 and the result is rounded once to the input dtype.

The max is a constant for differentiation (`stop_gradient`): the result does
not depend on the shift, so its exact derivative through it is zero, and the
backward pass need not compute the max's VJP only to cancel it. (The NaN a fully
masked row would bring comes from -inf - (-inf) in the shift, which the guard
removes; the max's own gradient there is finite, [0.5, 0.5] for two entries.)
"""

import jax
import jax.numpy as jnp


def softmax(x: jax.Array, *, axis: int = -1) -> jax.Array:
    """softmax of x along `axis`, in x's dtype; an all -inf slice gives zeros."""
    xf = x.astype(jnp.float32)
    m = jnp.max(xf, axis=axis, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    e = jnp.exp(xf - m)
    total = jnp.sum(e, axis=axis, keepdims=True)
    return (e / jnp.where(total == 0, 1.0, total)).astype(x.dtype)
