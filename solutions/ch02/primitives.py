"""Count the primitives of a traced program, nested sub-programs included.

`jax.make_jaxpr(fn)(*args)` traces fn into a ClosedJaxpr: `.jaxpr.eqns` is a flat
list of equations, each applying one primitive (`eqn.primitive.name`) to
variables and literals. Some primitives carry whole programs in their params:
`jit` (under "jaxpr"), `custom_jvp_call` / `custom_vjp_call` ("call_jaxpr"),
`cond` (a tuple of them under "branches"), `scan` and `while` (their bodies);
each a ClosedJaxpr on JAX 0.10, a Jaxpr (which carries its consts) from 0.11 on.
A count that stops at the top level misses everything inside them, so we walk
every param that is a jaxpr, or a tuple or list of them.
"""

from collections import Counter

import jax
from jax.extend import core as jex_core


def count_primitives(fn, *args) -> dict[str, int]:
    """{primitive name: number of equations} in fn's jaxpr for args, sub-jaxprs included.

    An equation that holds a sub-jaxpr (jit, custom_jvp_call, cond, scan ...) counts
    itself once, and every equation inside it counts too.
    """
    counts = Counter()
    _count(jax.make_jaxpr(fn)(*args).jaxpr, counts)
    return dict(counts)


def _count(jaxpr, counts):
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] += 1
        for sub in _subjaxprs(eqn):
            _count(sub, counts)


def _subjaxprs(eqn):
    for param in eqn.params.values():
        for value in param if isinstance(param, (tuple, list)) else (param,):
            if isinstance(value, jex_core.ClosedJaxpr):
                yield value.jaxpr
            elif isinstance(value, jex_core.Jaxpr):
                yield value
