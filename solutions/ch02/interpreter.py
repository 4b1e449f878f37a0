"""A jaxpr interpreter: evaluate a ClosedJaxpr one equation at a time.

A jaxpr is a program in SSA form: `constvars` (bound to the ClosedJaxpr's
`consts`), `invars` (the arguments), a list of `eqns`, each reading `invars`
(Vars, or Literals holding their value in `.val`) and writing `outvars`, and
the program's `outvars`. Evaluating it needs one environment, Var -> value:

  1. bind constvars to consts and invars to the arguments;
  2. for each eqn, read its inputs, compute, write its outputs;
  3. read the program's outvars.

An eqn that wraps a sub-program (jit, closed_call, custom_jvp_call,
custom_vjp_call) is evaluated by recursing into that sub-program, so the
interpreter sees every primitive the program really runs; everything else is
handed back to JAX with `eqn.primitive.bind(*invals, **eqn.params)`, which runs
the primitive eagerly. This is the skeleton of every JAX transformation: jvp,
vmap and the Pallas lowering all walk a jaxpr like this one.
"""

from jax.extend import core as jex_core

# Primitive name -> the param holding its sub-program.
CALL_PRIMITIVES = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def eval_jaxpr(closed_jaxpr, *args, on_eqn=None) -> list:
    """The outputs (a list) of closed_jaxpr applied to args, evaluated eqn by eqn.

    on_eqn, if given, is called as on_eqn(eqn) for every equation evaluated by
    `bind`, in evaluation order (never for the call equations recursed into).
    """
    return _eval(closed_jaxpr.jaxpr, closed_jaxpr.consts, list(args), on_eqn)


def _eval(jaxpr, consts, args, on_eqn):
    env = {}

    def read(atom):
        return atom.val if isinstance(atom, jex_core.Literal) else env[atom]

    def write(var, value):
        if not isinstance(var, jex_core.DropVar):
            env[var] = value

    for var, value in zip(jaxpr.constvars, consts):
        write(var, value)
    for var, value in zip(jaxpr.invars, args):
        write(var, value)

    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        sub = CALL_PRIMITIVES.get(eqn.primitive.name)
        if sub is not None:
            inner = eqn.params[sub]
            if isinstance(inner, jex_core.ClosedJaxpr):
                outvals = _eval(inner.jaxpr, inner.consts, invals, on_eqn)
            else:
                outvals = _eval(inner, (), invals, on_eqn)
        else:
            if on_eqn is not None:
                on_eqn(eqn)
            outvals = eqn.primitive.bind(*invals, **eqn.params)
            if not eqn.primitive.multiple_results:
                outvals = [outvals]
        for var, value in zip(eqn.outvars, outvals):
            write(var, value)

    return [read(v) for v in jaxpr.outvars]
