"""Exercise ch02.interpreter: evaluate a ClosedJaxpr one equation at a time.

Contract:
  - closed_jaxpr is a jax.extend.core.ClosedJaxpr (from jax.make_jaxpr); its
    .jaxpr has constvars (bound to closed_jaxpr.consts), invars (bound to args),
    eqns and outvars; return the outputs as a list, one per outvar;
  - an equation's inputs are Vars (look them up) or Literals (their value is .val);
  - recurse into the sub-program of these call primitives instead of binding
    them: jit / pjit (param "jaxpr"), closed_call, custom_jvp_call and
    custom_vjp_call (param "call_jaxpr"); a sub-program may itself be a ClosedJaxpr
    (with consts) or a plain Jaxpr;
  - evaluate every other equation with eqn.primitive.bind(*invals, **eqn.params);
    it returns a list when eqn.primitive.multiple_results, else one value;
  - on_eqn, if given, is called as on_eqn(eqn) just before each bind, so it
    sees every primitive the program runs, in order, and never a call primitive.
"""

from jax.extend import core as jex_core


def eval_jaxpr(closed_jaxpr, *args, on_eqn=None) -> list:
    """The outputs (a list) of closed_jaxpr applied to args, evaluated eqn by eqn."""
    raise NotImplementedError("write eval_jaxpr(): an env dict Var -> value; read, bind or recurse, write")
