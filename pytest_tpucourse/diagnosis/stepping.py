"""A traced program evaluated equation by equation: the first NaN and the first Inf an
equation makes out of operands that held none, and where the NaN in a value came from.

A NaN or an Inf in a result is a symptom; the equation that first turned finite operands
into it is the evidence. `Walk` evaluates a jaxpr one equation at a time (each primitive
bound eagerly on concrete arrays), descending into calls, `pl.when` branches and loops, and
notes for each kind the first equation that made it: `exp` of 1e4 is an overflow, `div` of
0 by 0 is 0/0, `sub` of inf and inf is inf - inf. It also carries labels: an argument given
a label ("acc_ref before anything writes it") passes it on to every value computed from it
that holds a NaN, so the labels on a result name the never-written memory its NaN was read
from. Kernels run under it one grid step at a time (kernel_steps.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import jax_internals

# Calls whose one sub-jaxpr takes the equation's operands as they are.
_CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "remat": "jaxpr", "checkpoint": "jaxpr", "custom_jvp_call": "call_jaxpr",
          "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr"}
MOST_LOOP_STEPS = 4096  # a longer loop is run whole (bound), not step by step
NONE = frozenset()


@dataclass(frozen=True)
class Made:
    """The first equation that made a NaN (kind "NaN") or an Inf ("Inf") from operands that held
    none of that kind (an Inf: operands with neither)."""

    kind: str
    primitive: str
    where: str  # "file.py:12", or "" where unknown
    operands: tuple  # elementwise equations: each operand's value at the first element made; else ()
    point: tuple | None = None  # the grid point, inside a kernel
    kernel: str = ""  # the kernel's name, inside a kernel
    dtype: str = ""  # the dtype of the value made


def non_finite(value) -> tuple[bool, bool]:
    """(holds a NaN, holds an Inf) for an array of floats; (False, False) for anything else."""
    array = _floats(value)
    if array is None:
        return False, False
    return bool(np.isnan(array).any()), bool(np.isinf(array).any())


def _floats(value):
    dtype = getattr(value, "dtype", None)
    if dtype is None or not _is_float(dtype):
        return None
    return np.asarray(value).astype(np.float64, copy=False)


def _is_float(dtype) -> bool:
    import jax.numpy as jnp

    try:
        return bool(jnp.issubdtype(dtype, jnp.inexact))
    except TypeError:
        return False


class Walk:
    """One evaluation, equation by equation, noting the first NaN and Inf made (`made`)."""

    def __init__(self, *, on_kernel=None):
        self.made: dict[str, Made] = {}
        self.point: tuple | None = None
        self.kernel = ""
        # on_kernel(eqn, operands) -> outputs, or None to bind it: how a pallas_call of the outer
        # program is run (kernel_steps.py descends into it where it makes the first NaN or Inf)
        self.on_kernel = on_kernel

    def run(self, closed, args, labels=None):
        """closed(*args) evaluated: (outputs, their labels)."""
        return self.eval(closed.jaxpr, closed.consts, list(args), list(labels or [NONE] * len(args)))

    def eval(self, jaxpr, consts, args, labels):
        env, tags = {}, {}

        def read(atom):
            literal = jax_internals.literal_value(atom, _NOT_LITERAL)
            return (literal, NONE) if literal is not _NOT_LITERAL else (env[atom], tags.get(atom, NONE))

        for var, value in zip(jaxpr.constvars, consts):
            env[var] = value
        for var, value, label in zip(jaxpr.invars, args, labels):
            env[var], tags[var] = value, label
        for eqn in jaxpr.eqns:
            values, marks = zip(*(read(v) for v in eqn.invars)) if eqn.invars else ((), ())
            outs, out_marks = self._equation(eqn, list(values), list(marks))
            for var, value, mark in zip(eqn.outvars, outs, out_marks):
                env[var], tags[var] = value, mark
        results = [read(v) for v in jaxpr.outvars]
        return [r[0] for r in results], [r[1] for r in results]

    def _equation(self, eqn, values, marks):
        name = eqn.primitive.name
        params = jax_internals.equation_params(eqn)
        if name == "cond":
            branch = params["branches"][int(np.asarray(values[0]))]
            return self.eval(branch.jaxpr, branch.consts, values[1:], marks[1:])
        sub = params.get(_CALLS.get(name, ""))
        if sub is not None:
            jaxpr, consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
            if len(jaxpr.invars) == len(values):
                return self.eval(jaxpr, consts, values, marks)
        if name == "while":
            found = self._while(params, values, marks)
            if found is not None:
                return found
        if name == "scan":
            found = self._scan(params, values, marks)
            if found is not None:
                return found
        if name == "pallas_call" and self.on_kernel is not None:
            outs = self.on_kernel(eqn, values)
            if outs is not None:
                return self._noted(eqn, values, marks, outs)
        return self._noted(eqn, values, marks, self._bind(eqn, values))

    @staticmethod
    def _bind(eqn, values):
        with eqn.ctx.manager:
            outs = eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params))
        return list(outs) if eqn.primitive.multiple_results else [outs]

    def _noted(self, eqn, values, marks, outs):
        """Note what the equation made; pass the labels of operands holding a NaN to results holding one."""
        seen = [non_finite(v) for v in values]
        nan_in, inf_in = any(s[0] for s in seen), any(s[1] for s in seen)
        made = [non_finite(v) for v in outs]
        for kind, present, before in (("NaN", 0, nan_in), ("Inf", 1, nan_in or inf_in)):
            if kind not in self.made and not before and any(m[present] for m in made):
                self.made[kind] = self._made(kind, eqn, values, outs)
        carried = frozenset().union(*(m for m, s in zip(marks, seen) if s[0])) if nan_in else NONE
        return outs, [carried if m[0] else NONE for m in made]

    def _made(self, kind, eqn, values, outs) -> Made:
        test = np.isnan if kind == "NaN" else np.isinf
        out = next(o for o in outs if non_finite(o)[0 if kind == "NaN" else 1])
        array = _floats(out)
        first = tuple(int(i) for i in np.argwhere(test(array))[0])
        operands = ()
        try:
            operands = tuple(np.broadcast_to(np.asarray(v), array.shape)[first].item() for v in values)
        except (ValueError, TypeError, IndexError):
            pass  # not elementwise: a reduction, a matmul
        return Made(kind, eqn.primitive.name, jax_internals.user_location(eqn), operands, self.point,
                    self.kernel, str(getattr(out, "dtype", "")))

    def _while(self, params, values, marks):
        cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
        cond, body = params["cond_jaxpr"], params["body_jaxpr"]
        cond_consts, body_consts = values[:cond_n], values[cond_n:cond_n + body_n]
        body_marks = marks[cond_n:cond_n + body_n]
        carry, carry_marks = values[cond_n + body_n:], marks[cond_n + body_n:]
        import jax

        for _ in range(MOST_LOOP_STEPS):
            if not bool(np.asarray(jax.core.eval_jaxpr(cond.jaxpr, cond.consts, *cond_consts, *carry)[0])):
                return carry, carry_marks
            carry, carry_marks = self.eval(body.jaxpr, body.consts, [*body_consts, *carry],
                                           [*body_marks, *carry_marks])
        return None

    def _scan(self, params, values, marks):
        length, consts_n, carry_n = params["length"], params["num_consts"], params["num_carry"]
        if length > MOST_LOOP_STEPS:
            return None
        body = params["jaxpr"]
        consts, carry, xs = values[:consts_n], values[consts_n:consts_n + carry_n], values[consts_n + carry_n:]
        const_marks, carry_marks = marks[:consts_n], marks[consts_n:consts_n + carry_n]
        x_marks = marks[consts_n + carry_n:]
        ys, y_marks = [], []
        order = range(length - 1, -1, -1) if params.get("reverse") else range(length)
        for i in order:
            outs, out_marks = self.eval(body.jaxpr, body.consts, [*consts, *carry, *(x[i] for x in xs)],
                                        [*const_marks, *carry_marks, *x_marks])
            carry, carry_marks = outs[:carry_n], out_marks[:carry_n]
            ys.append(outs[carry_n:])
            y_marks.append(out_marks[carry_n:])
        if params.get("reverse"):
            ys.reverse()
        import jax.numpy as jnp

        stacked = [jnp.stack([y[k] for y in ys]) for k in range(len(body.jaxpr.outvars) - carry_n)] if ys else []
        if not ys:
            return None
        joined = [frozenset().union(*(m[k] for m in y_marks)) for k in range(len(stacked))]
        return [*carry, *stacked], [*carry_marks, *joined]


_NOT_LITERAL = object()
