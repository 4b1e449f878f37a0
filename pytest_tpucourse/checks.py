"""The shared checker: is what a graded function returned right?

Values and grads are checked differentially, against a float64 oracle run on
the same (already dtype-rounded) inputs, under the tolerance rule of
tolerance.py. Every output and every grad is checked and reported on its own
(`dq`, `dk`, `dv` each with its error and its bound). Failures are WrongResult
outcomes whose message names the function, the output, the error against the
bound, the worst element, and a one-line reproducer.

    checks.assert_matches_reference(impl.matmul.matmul, (x, y), kwargs=blocks,
                                    reference=references.MATMUL, repro=...)
    checks.assert_grads_match(flash, (q, k, v), reference=references.ATTENTION.bind(causal=True),
                              argnames=("dq", "dk", "dv"), seed=seed, repro=...)
"""

from __future__ import annotations

import functools

import numpy as np

from . import structure, tolerance
from .implementations import GradedFunction, compiled
from .outcomes import GradingOutcome, WrongResult


class CheckerError(GradingOutcome):
    """The graded test itself is wrong (its oracle or floor raised, bad arguments)."""


def graded(function, name: str) -> GradedFunction:
    """Wrap any callable (JAX's own kernels, say) to be graded like learner code."""
    return GradedFunction(function, name)


def gradient(fn: GradedFunction, *, argnums=(0, 1, 2), **kwargs) -> GradedFunction:
    """The gradient of sum(fn(*args, **kwargs)) (in float32) with respect to `argnums`,
    graded as fn's own code: a stub is still TODO, an error still names fn's file. Its
    program holds fn's forward and backward, so structural checks and race checks on it
    see every kernel a training step runs."""
    import jax

    return fn.derived(
        lambda function: jax.grad(lambda *a: function(*a, **kwargs).astype("float32").sum(),
                                  argnums=argnums),
        f"the gradient of {fn.display}")


# ---------------------------------------------------------------- values


def assert_close(actual, expected, *, fn, dtype, tol: float | None = None, floor=None,
                 kind: str = "forward", what: str = "output", repro: str = "") -> None:
    """Fail with a WrongResult unless `actual` matches the float64 oracle output `expected`.

    fn: the graded function that produced `actual` (named in every message).
    dtype: the dtype `actual` must have.
    floor: the XLA floor's output on the same inputs; its error scales the bound.
    tol: an explicit bound, replacing the rule (per-test override).
    kind: "forward" or "grad" (picks the base tolerance).
    """
    name = f"{fn.display}: {what}"
    suffix = f"\n  reproduce: {repro}" if repro else ""
    want = np.dtype(dtype)
    expected = np.asarray(expected)

    if not hasattr(actual, "shape") or not hasattr(actual, "dtype"):
        raise WrongResult(f"{name} should be an array of shape {expected.shape} and dtype "
                          f"{want.name}, got {type(actual).__name__}.{suffix}")
    if tuple(actual.shape) != tuple(expected.shape):
        raise WrongResult(f"{name} has shape {tuple(actual.shape)}, expected "
                          f"{tuple(expected.shape)}.{suffix}")
    if np.dtype(actual.dtype) != want:
        raise WrongResult(f"{name} has dtype {np.dtype(actual.dtype).name}, expected {want.name}.{suffix}")
    if expected.size == 0:
        return
    if not _is_float_dtype(want):
        _assert_exact(name, np.asarray(actual), expected.astype(want), suffix)
        return

    got = np.asarray(actual).astype(np.float64)
    ref = tolerance.rounded_reference(expected, want)
    _assert_same_non_finite(name, got, ref, suffix)
    floor64 = None if floor is None else np.asarray(floor).astype(np.float64)
    error, bound, floor_error = tolerance.judge(got, expected, want, kind, floor64)
    if tol is not None:
        bound, rule = tol, "set by this test"
    elif floor is not None:
        rule = (f"the XLA floor's own error {floor_error:.1e} + {tolerance.base(want, kind):.0e}, "
                f"at most {tolerance.CEILING[want.name]:.0e}")
    else:
        rule = f"{kind} base for {want.name}"
    if not error <= bound:
        finite = np.isfinite(ref)
        diff = np.abs(np.subtract(got, ref, out=np.zeros_like(got), where=finite))
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))
        raise WrongResult(
            f"{name} is wrong: relative error {error:.2e} > bound {bound:.2e} ({rule}).\n"
            f"  worst element {list(worst)}: got {got[worst]:.6g}, expected {ref[worst]:.6g}{suffix}"
        )


def _assert_exact(name, got, ref, suffix) -> None:
    wrong = got != ref
    if wrong.any():
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise WrongResult(f"{name} differs in {int(wrong.sum())} of {ref.size} entries (first at "
                          f"{list(first)}: got {got[first]}, expected {ref[first]}).{suffix}")


def _assert_same_non_finite(name, got, ref, suffix) -> None:
    """NaN/Inf never pass, unless the oracle has the very same value in the same place."""
    same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
    bad = ~np.isfinite(got) & ~same
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        kinds = "NaN" if np.isnan(got[bad]).all() else "NaN/Inf"
        raise WrongResult(
            f"{name} has {int(bad.sum())} {kinds} values of {got.size} (first at {list(first)}), "
            f"where the reference is {ref[first]:g}.\n  Under TPU interpret mode uninitialised "
            f"memory reads NaN: a block never written, or a scratch buffer read before it is set."
            f"{suffix}")
    missing = np.isfinite(got) & ~np.isfinite(ref)
    if missing.any():
        first = tuple(int(i) for i in np.argwhere(missing)[0])
        raise WrongResult(f"{name} is {got[first]:g} at {list(first)} where the reference is "
                          f"{ref[first]:g}.{suffix}")


def assert_matches_reference(fn, args, *, reference, kwargs=None, names=None,
                             tol: float | None = None, require_kernel: bool = True,
                             repro: str = "") -> None:
    """Run fn(*args, **kwargs) and check every output against the oracle in float64.

    reference: a references.Reference (bind its own keyword arguments first):
      its oracle runs on float64 copies of args; its floor (the XLA
      implementation at the course's precision contract) runs on args as given
      and fixes each output's expected dtype and the error scale.
    kwargs: keyword arguments for fn only (block sizes).
    names: one name per output leaf ("out", "lse"); default "output[i]".
    require_kernel: fail unless fn's program contains a pallas_call (anti-cheat).
    """
    kwargs = kwargs or {}
    if require_kernel:
        structure.assert_uses_pallas(fn, *args, **kwargs)
    got = fn(*args, **kwargs)
    floor_out = _run_test_code("floor", _compiled(reference.floor), args, {})
    expected = _run_oracle(reference.oracle, args, {})
    _compare_trees(fn, got, expected, floor_out, names=names, tol=tol, kind="forward",
                   what="output", repro=repro)


def assert_rejects(fn, args, *, kwargs=None, error: type[Exception] = ValueError,
                   mentions=(), repro: str = "") -> None:
    """fn(*args, **kwargs) must raise `error` whose message names every string in `mentions`.

    For inputs a function documents as unsupported (a length its blocks do not divide):
    a clear refusal passes; returning anything, or failing some other way, does not.
    """
    import jax

    from . import deadline

    kwargs = kwargs or {}
    function = fn.resolve()
    suffix = f"\n  reproduce: {repro}" if repro else ""
    expected = f"a {error.__name__} naming {', '.join(map(repr, mentions))}" if mentions \
        else f"a {error.__name__}"
    try:
        deadline.call(lambda: jax.block_until_ready(function(*args, **kwargs)))
    except error as raised:
        missing = [m for m in mentions if str(m) not in str(raised)]
        if missing:
            raise WrongResult(f"{fn.display} raised {type(raised).__name__}: {raised}\n  expected "
                              f"{expected}; the message does not name {', '.join(map(repr, missing))}."
                              + suffix) from None
        return
    except GradingOutcome:
        raise
    except Exception as raised:
        if isinstance(raised, (NotImplementedError, deadline.DeadlineExceeded)):
            raise fn._outcome(raised) from None  # the stub (TODO) or a hang
        raise WrongResult(f"{fn.display} raised {type(raised).__name__}: "
                          f"{str(raised).splitlines()[0] if str(raised) else ''}\n  expected "
                          f"{expected}." + suffix) from None
    raise WrongResult(f"{fn.display} returned a result; expected it to refuse these inputs "
                      f"with {expected}." + suffix)


# ---------------------------------------------------------------- grads


def assert_grads_match(fn, args, *, reference, argnames, kwargs=None, seed: int = 0,
                       tol: float | None = None, check_custom_vjp: bool = True,
                       repro: str = "") -> None:
    """Check fn's VJP for random cotangents: each named input's grad on its own.

    argnames: one entry per positional arg, the grad's name ("dq") or None to
      skip an input (integer tables, masks).
    check_custom_vjp: where fn defines a jax.custom_vjp, also run
      jax.test_util.check_grads (reverse mode) on float32 copies of the inputs,
      so a backward that disagrees with its own forward fails even where the
      oracle comparison is loose.
    """
    import jax

    kwargs = kwargs or {}
    if len(argnames) != len(args):
        raise CheckerError(f"argnames {argnames} must name each of the {len(args)} inputs (or None)")
    floor_out = _run_test_code("floor", _compiled(reference.floor), args, {})
    cotangents = _random_like(floor_out, seed)
    _, got = fn.vjp(tuple(args), cotangents, **kwargs)

    def floor_grads():
        return _pullback(reference.floor)(tuple(args), cotangents)

    def oracle_grads():
        return _pullback(reference.oracle)(_as_float64(tuple(args)), _as_float64(cotangents))

    floor_g = _run_test_code("floor's VJP", floor_grads, (), {})
    with jax.enable_x64(True):
        oracle_g = _run_test_code("oracle's VJP", oracle_grads, (), {})
        # Inputs named None (masks, integer tables) have float0 cotangents: skip them.
        oracle_g = [None if name is None else np.asarray(g, dtype=np.float64)
                    for name, g in zip(argnames, oracle_g)]
    for name, g, ref, fl, arg in zip(argnames, got, oracle_g, floor_g, args):
        if name is None:
            continue
        assert_close(g, ref, fn=fn, dtype=np.asarray(arg).dtype, tol=tol, floor=np.asarray(fl),
                     kind="grad", what=f"grad {name}", repro=repro)
    if check_custom_vjp and structure.defines_custom_vjp(fn.jaxpr(*args, **kwargs)):
        _assert_vjp_consistent_with_forward(fn, args, kwargs, repro)


def _pullback(function):
    """The VJP of an oracle or floor as one compiled program: op-by-op it would compile
    every primitive of the forward and the backward separately, for every dtype."""
    program = _compiled(function, "vjp")
    return lambda args, cotangents: program(args, cotangents)[1]


def _compiled(function, kind: str = "call"):
    """An oracle's or floor's forward ("call") or VJP ("vjp") as one jitted program.

    A Reference.bind partial is compiled as its function with its keyword arguments, so
    every test that binds the same ones shares one program (implementations.compiled).
    """
    if isinstance(function, functools.partial) and not function.args:
        return compiled(function.func, function.keywords, kind)
    return compiled(function, {}, kind)


# check_grads compares the VJP's projection on a random direction with a central
# difference. Its float32 default step (1e-4) drowns a 65k-element attention in
# rounding noise (JAX's own flash attention fails by 0.16 at (1, 2, 256, 128));
# a 1e-3 step with a 1e-2 tolerance passes it, while a backward off by a constant
# factor or a missing term moves the projection by far more than 1%.
CHECK_GRADS_EPS = 1e-3
CHECK_GRADS_TOL = 1e-2


def _assert_vjp_consistent_with_forward(fn, args, kwargs, repro) -> None:
    import jax.numpy as jnp
    from jax.test_util import check_grads

    function = fn.resolve()
    args32 = tuple(jnp.asarray(a, jnp.float32) if _is_float(a) else a for a in args)
    try:
        check_grads(lambda *a: function(*a, **kwargs), args32, order=1, modes=["rev"],
                    eps=CHECK_GRADS_EPS, atol=CHECK_GRADS_TOL, rtol=CHECK_GRADS_TOL)
    except AssertionError as error:
        first = "\n".join(str(error).strip().splitlines()[:4])
        raise WrongResult(
            f"{fn.display}: its custom_vjp backward disagrees with numerical differentiation of "
            f"its own forward (jax.test_util.check_grads, reverse mode, float32):\n  {first}"
            + (f"\n  reproduce: {repro}" if repro else "")) from None
    except GradingOutcome:
        raise
    except Exception as error:  # the learner's code raised inside check_grads
        raise fn._outcome(error) from None


# ---------------------------------------------------------------- helpers


def _compare_trees(fn, got, expected, floor_out, *, names, tol, kind, what, repro) -> None:
    import jax

    want_leaves, want_tree = jax.tree.flatten(floor_out)
    expected_leaves = jax.tree.leaves(expected)
    if len(expected_leaves) != len(want_leaves):
        raise CheckerError(f"the oracle returns {len(expected_leaves)} outputs and the floor "
                           f"{len(want_leaves)}: the graded test is inconsistent")
    got_leaves, got_tree = jax.tree.flatten(got)
    if names is None:
        names = [what] if len(want_leaves) == 1 else [f"{what}[{i}]" for i in range(len(want_leaves))]
    if got_tree != want_tree:
        raise WrongResult(
            f"{fn.display} returned {_describe_tree(got)}; expected {_describe_tree(floor_out)} "
            f"({', '.join(names)})." + (f"\n  reproduce: {repro}" if repro else ""))
    for name, g, e, f in zip(names, got_leaves, expected_leaves, want_leaves):
        assert_close(g, e, fn=fn, dtype=np.asarray(f).dtype, tol=tol, floor=np.asarray(f),
                     kind=kind, what=name, repro=repro)


def _describe_tree(tree) -> str:
    import jax

    leaves = jax.tree.leaves(tree)
    shapes = ", ".join(f"{getattr(x, 'dtype', type(x).__name__)}{list(getattr(x, 'shape', []))}"
                       for x in leaves)
    return f"{len(leaves)} array(s) [{shapes}] as {type(tree).__name__}"


def _run_test_code(what: str, function, args, kwargs):
    import jax

    try:
        return jax.block_until_ready(function(*args, **kwargs))
    except GradingOutcome:
        raise
    except Exception as error:
        raise CheckerError(f"the graded test's {what} raised {type(error).__name__}: {error} "
                           f"(a bug in the test, not in the code under grading)") from None


def _run_oracle(oracle, args, kwargs):
    import jax

    with jax.enable_x64(True):
        out = _run_test_code("oracle", _compiled(oracle), _as_float64(args), kwargs)
        return jax.tree.map(lambda x: np.asarray(x, dtype=np.float64), out)


def _is_float_dtype(dtype) -> bool:
    import jax.numpy as jnp  # numpy alone does not know bfloat16 is a float

    return bool(jnp.issubdtype(dtype, jnp.inexact))


def _is_float(x) -> bool:
    return hasattr(x, "dtype") and _is_float_dtype(x.dtype)


def _as_float64(tree):
    """float64 copies of the float leaves (exactly the values the kernel sees)."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x, dtype=np.float64)) if _is_float(x) else x,
                        tree)


def _random_like(tree, seed: int):
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda x: jnp.asarray(rng.standard_normal(np.shape(x)).astype(np.float32), dtype=x.dtype),
        tree)


# Structural checks live in structure.py; re-exported as part of the checker's API.
assert_one_kernel = structure.assert_one_kernel
assert_uses_pallas = structure.assert_uses_pallas
count_pallas_calls = structure.count_pallas_calls
