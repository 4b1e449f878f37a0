"""Exercise ch02.primitives: count the primitives of a traced program.

Trace fn with jax.make_jaxpr(fn)(*args) and count how many equations apply each
primitive (eqn.primitive.name). Count sub-programs too: an equation whose params
hold a jax.extend.core.ClosedJaxpr or Jaxpr (directly, or in a tuple or list, as
cond's branches are) counts itself once, and every equation inside counts as well.
"""

import jax
from jax.extend import core as jex_core


def count_primitives(fn, *args) -> dict[str, int]:
    """{primitive name: number of equations} in fn's jaxpr for args, sub-jaxprs included."""
    raise NotImplementedError("write count_primitives(): walk jax.make_jaxpr(fn)(*args).jaxpr.eqns, recursing into params")
