"""The shared checker: is what a graded function returned right?

Values and grads are checked differentially, against a float64 oracle run on
the same (already dtype-rounded) inputs, under the tolerance rule of
tolerance.py. Every output and every grad is checked and reported on its own
(`dq`, `dk`, `dv` each with its error and its bound). Failures are WrongResult
outcomes whose message names the function, the output, the error against the
bound, the worst element, and the lines that make the same call again at a Python
prompt, written from the call itself (reproduction.py); `note=` adds what a call cannot
show.

    checks.assert_matches_reference(impl.matmul.matmul, (x, y), kwargs=blocks,
                                    reference=references.MATMUL)
    checks.assert_grads_match(flash, (q, k, v), reference=references.ATTENTION.bind(causal=True),
                              argnames=("dq", "dk", "dv"), seed=seed)
"""

from __future__ import annotations

import functools

import numpy as np

from .core import tolerance
from .core import trusted_cases as trusted  # the cases `tpucourse grade` checks outside the tree's process
from .readers import traced_program
from .grading import context
from .grading.calls import GradedFunction
from .grading.compiled import CompiledPrograms
from .grading.deadline import DeadlineExceeded
from .diagnosis.replay import Replay
from .core.outcomes import CheckerError, GradingOutcome, WrongResult
from .readers.reproduction import remember, reproduction
from .strategies import cotangents_like

__all__ = [
    "assert_close", "assert_equal", "assert_grads_match", "assert_matches_reference", "at_graded_precision",
    "assert_one_kernel", "assert_rejects", "assert_uses_pallas", "CHECK_GRADS_EPS",
    "CHECK_GRADS_TOL", "CheckerError", "count_pallas_calls", "fail", "for_this_backend", "graded", "gradient",
    "toolchain_words", "trusted", "WrongResult",
]


def toolchain_words(error: BaseException, max_lines: int = 4) -> str:
    """What the toolchain said when it refused a program, for a graded test's message: its own
    text without JAX's advice to file a bug (never the learner's business), at most `max_lines`
    lines, each at most 300 characters."""
    from .core.outcomes import without_jax_advice

    lines = without_jax_advice(str(error)).splitlines() or [type(error).__name__]
    return "\n".join([line[:300] for line in lines[:max_lines]] + (["..."] if len(lines) > max_lines else []))


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
                 kind: str = "forward", what: str = "output", note: str = "") -> None:
    """Fail with a WrongResult unless `actual` matches the float64 oracle output `expected`.

    fn: the graded function that produced `actual` (named in every message; its latest call
      in this test is the reproduction).
    dtype: the dtype `actual` must have.
    floor: the XLA floor's output on the same inputs; its error scales the bound.
    tol: an explicit bound, replacing the rule (per-test override).
    kind: "forward" or "grad" (picks the base tolerance).
    note: what the reproduction cannot show (values the test set by hand, say).
    """
    _assert_close(actual, expected, fn=fn, dtype=dtype, tol=tol, floor=floor, kind=kind, what=what,
                  suffix=reproduction(fn, note=note), replay=_latest_call(fn, actual))


def _latest_call(fn, actual):
    """fn's latest call in this test, to make again where `actual` is one of its results."""
    from .readers.reproduction import last_call

    call = last_call(fn) if hasattr(fn, "resolve") else None
    if call is None or call.kind != "call" or not hasattr(actual, "shape"):
        return None
    return Replay.of_call(fn, call.args, call.kwargs, leaf=-1, shape=tuple(actual.shape))


def _assert_close(actual, expected, *, fn, dtype, tol, floor, kind, what, suffix, replay=None) -> None:
    """replay: the call that produced `actual` (diagnosis/replay.py), made again to explain a
    wrong result; None where the check cannot make it again (assert_close on a given array)."""
    name = f"{fn.display}: {what}"
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
    per_device = _shards_by_device(actual)
    if per_device:
        for device, index, data in per_device:
            _assert_close(data, expected[index], fn=fn, dtype=dtype, tol=tol,
                          floor=None if floor is None else np.asarray(floor)[index], kind=kind,
                          what=f"{what} on device {device}", suffix=suffix,
                          replay=replay and replay.on_device(device))
        return
    if not _is_float_dtype(want):
        _assert_exact(name, np.asarray(actual), expected.astype(want), suffix)
        return

    got = np.asarray(actual).astype(np.float64)
    ref = tolerance.rounded_reference(expected, want)
    floor64 = None if floor is None else np.asarray(floor).astype(np.float64)
    _assert_same_non_finite(fn, name, got, ref, suffix, _evidence(replay, got, expected, what, want, kind))
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
            f"  worst element {list(worst)}: got {got[worst]:.6g}, expected {ref[worst]:.6g}",
            evidence=_evidence(replay, got, expected, what, want, kind), suffix=suffix)


def _shards_by_device(actual):
    """(device id, index, data) of each device's buffer of an array spread over several devices.

    A multi-device result is judged buffer by buffer: a replicated output (an all-gather's)
    has one full copy per device, and a wrong copy on one device is invisible in the single
    copy that np.asarray reads. None for an array held by one device.
    """
    shards = getattr(actual, "addressable_shards", None)
    if not shards or len(shards) < 2:
        return None
    return [(s.device.id, s.index, s.data) for s in sorted(shards, key=lambda s: s.device.id)]


def _assert_exact(name, got, ref, suffix) -> None:
    wrong = got != ref
    if wrong.any():
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise WrongResult(f"{name} differs in {int(wrong.sum())} of {ref.size} entries (first at "
                          f"{list(first)}: got {got[first]}, expected {ref[first]}).{suffix}")


def _assert_same_non_finite(fn, name, got, ref, suffix, evidence) -> None:
    """NaN/Inf never pass, unless the oracle has the very same value in the same place.

    The report says what was seen (how many NaN and Inf, the first, and what the inputs held
    where they were not finite); its cause is the evidence's to say (diagnosis/evidence.py:
    the call made again), never a list of every cause that could be.
    """
    same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
    bad = ~np.isfinite(got) & ~same
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        counts = [f"{int(n):,} {label}" for n, label in
                  (((np.isnan(got) & bad).sum(), "NaN"), ((np.isinf(got) & bad).sum(), "Inf")) if n]
        lines = [f"{name} has {' and '.join(counts)} of {got.size:,} values (the first at {list(first)}: "
                 f"{got[first]:g} where the reference is {ref[first]:g})."]
        held = _non_finite_inputs(fn)
        if held is not None and held != "hold no NaN or Inf":
            lines.append(f"  The inputs {held}.")
        raise WrongResult("\n".join(lines), evidence=evidence, suffix=suffix)
    missing = np.isfinite(got) & ~np.isfinite(ref)
    if missing.any():
        first = tuple(int(i) for i in np.argwhere(missing)[0])
        raise WrongResult(f"{name} is {got[first]:g} at {list(first)} where the reference is "
                          f"{ref[first]:g}.{suffix}")


def _evidence(replay, got, expected, what, dtype, kind):
    """The lines that explain a wrong `got`, computed when the report is written; None without a
    call to make again."""
    if replay is None:
        return None

    def lines():
        from .diagnosis.evidence import explain

        finding = explain(replay, got, np.asarray(expected, dtype=np.float64), what=what, dtype=dtype,
                          kind=kind)
        return list(finding.lines) if finding is not None else []
    return lines


def _non_finite_inputs(fn) -> str | None:
    """What the inputs of fn's latest call held that was not finite, in words; None if unknown."""
    import jax

    from .readers.reproduction import last_call

    call = last_call(fn)
    if call is None:
        return None
    found = []
    for index, leaf in enumerate(jax.tree.leaves((call.args, call.kwargs))):
        if not (hasattr(leaf, "dtype") and _is_float_dtype(leaf.dtype)):
            continue
        values = np.asarray(leaf).astype(np.float64)
        nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
        if nan or inf:
            what = " and ".join(f"{n:,} {label}" for n, label in ((nan, "NaN"), (inf, "Inf")) if n)
            found.append(f"input {index} {what}")
    return "hold no NaN or Inf" if not found else "hold " + "; ".join(found) + " themselves"


def assert_equal(actual, expected, *, fn, what: str, note: str = "") -> None:
    """Fail with a WrongResult unless `actual == expected`: for exact, non-array results
    (counts, tables, a parsed program, a simulated schedule), where no tolerance applies.
    Dicts name the keys that differ; sequences of the same length the first item."""
    if actual == expected:
        return
    if isinstance(actual, dict) and isinstance(expected, dict):
        wrong = [f"{k!r}: {actual[k]!r} (expected {expected[k]!r})" for k in expected
                 if k in actual and actual[k] != expected[k]]
        missing = [repr(k) for k in expected if k not in actual]
        extra = [repr(k) for k in actual if k not in expected]
        parts = ([f"wrong {', '.join(wrong[:6])}"] if wrong else []) \
            + ([f"missing {', '.join(missing[:6])}"] if missing else []) \
            + ([f"not expected {', '.join(extra[:6])}"] if extra else [])
        detail = f"{what} differs: {'; '.join(parts)}.\n  expected {expected!r}"
    elif (isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple))
          and len(actual) == len(expected)):
        index = next(i for i, (a, e) in enumerate(zip(actual, expected)) if a != e)
        detail = (f"{what} differs first at [{index}]: {actual[index]!r}, expected {expected[index]!r}."
                  f"\n  expected {expected!r}")
    else:
        detail = f"{what} is {actual!r}; expected {expected!r}."
    raise WrongResult(f"{fn.display}: {detail}" + reproduction(fn, note=note))


def at_graded_precision(*trees):
    """The matmul precision graded calls and their floors run at for these inputs (grading/context.py),
    as a context: for a program a test traces itself (a jaxpr the graded code then evaluates), whose
    dots keep the precision they were traced at. A no-op off a native TPU."""
    return context.graded_precision(*trees)


def fail(fn, message: str, *, note: str = "") -> None:
    """Fail the test as fn's mistake: `message` (naming fn) and fn's reproduction."""
    raise WrongResult(message + reproduction(fn, note=note))


def for_this_backend(facts: dict):
    """facts["cpu"] or facts["tpu"]: the fact of the XLA this run compiles for (jax.default_backend()),
    where XLA:CPU and XLA:TPU make different programs of the same code (fusions, rewrites, where
    buffers live). Each backend's fact is read off that backend and kept in the course (a TPU's
    by bench/capture_tpu_facts.py, on the chip). On a backend `facts` does not name the test skips."""
    import jax
    import pytest

    backend = jax.default_backend()
    if backend not in facts:
        pytest.skip(f"what XLA:{backend.upper()} makes of this program was not measured (the course "
                    f"measured XLA:{', XLA:'.join(name.upper() for name in facts)})")
    return facts[backend]


def assert_matches_reference(fn, args, *, reference, kwargs=None, names=None,
                             tol: float | None = None, require_kernel: bool = True,
                             note: str = "") -> None:
    """Run fn(*args, **kwargs) and check every output against the oracle in float64.

    reference: a references.Reference (bind its own keyword arguments first):
      its oracle runs on float64 copies of args; its floor (the XLA
      implementation at the course's precision contract) runs on args as given
      and fixes each output's expected dtype and the error scale.
    kwargs: keyword arguments for fn only (block sizes).
    names: one name per output leaf ("out", "lse"); default "output[i]".
    require_kernel: fail unless fn's program contains a pallas_call (anti-cheat).
    note: what the reproduction of the call cannot show.
    """
    kwargs = kwargs or {}
    if require_kernel:
        traced_program.assert_uses_pallas(fn, *args, **kwargs)
    got = fn(*args, **kwargs)
    programs = fn.context.programs
    with context.graded_precision(args):  # the precision the graded call ran at
        floor_out = _run_test_code("floor", _compiled(programs, reference.floor), args, {})
    expected = _run_oracle(programs, reference.oracle, args, {})
    _compare_trees(fn, got, expected, floor_out, names=names, tol=tol, kind="forward",
                   what="output", suffix=reproduction(fn, note=note),
                   replay=lambda leaf: Replay.of_call(fn, args, kwargs, leaf))


def assert_rejects(fn, args, *, kwargs=None, error: type[Exception] = ValueError,
                   mentions=(), note: str = "") -> None:
    """fn(*args, **kwargs) must raise `error` whose message names every string in `mentions`.

    For inputs a function documents as unsupported (a length its blocks do not divide):
    a clear refusal passes; returning anything, or failing some other way, does not.
    """
    import jax

    kwargs = kwargs or {}
    function = fn.resolve()
    remember(fn, "call", args, kwargs)
    suffix = reproduction(fn, note=note)
    expected = f"a {error.__name__} naming {', '.join(map(repr, mentions))}" if mentions \
        else f"a {error.__name__}"
    try:
        fn.context.deadline.call(lambda: jax.block_until_ready(function(*args, **kwargs)))
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
        if isinstance(raised, (NotImplementedError, DeadlineExceeded)):
            raise fn._outcome(raised) from None  # the stub (TODO) or a hang
        raise WrongResult(f"{fn.display} raised {type(raised).__name__}: "
                          f"{str(raised).splitlines()[0] if str(raised) else ''}\n  expected "
                          f"{expected}." + suffix) from None
    raise WrongResult(f"{fn.display} returned a result; expected it to refuse these inputs "
                      f"with {expected}." + suffix)


# ---------------------------------------------------------------- grads


def assert_grads_match(fn, args, *, reference, argnames, kwargs=None, seed: int = 0,
                       tol: float | None = None, check_custom_vjp: bool = True,
                       note: str = "") -> None:
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
    programs = fn.context.programs
    with context.graded_precision(args):  # the precision the graded call ran at
        floor_out = _run_test_code("floor", _compiled(programs, reference.floor), args, {})
    cotangents = cotangents_like(floor_out, seed)
    _, got = fn.vjp(tuple(args), cotangents, **kwargs)

    def floor_grads():
        return _pullback(programs, reference.floor)(tuple(args), cotangents)

    def oracle_grads():
        return _pullback(programs, reference.oracle)(_as_float64(tuple(args)), _as_float64(cotangents))

    with context.graded_precision(args):
        floor_g = _run_test_code("floor's VJP", floor_grads, (), {})
    with jax.enable_x64(True), on_the_hosts_cpu():
        oracle_g = _run_test_code("oracle's VJP", oracle_grads, (), {})
        # Inputs named None (masks, integer tables) have float0 cotangents: skip them.
        oracle_g = [None if name is None else np.asarray(g, dtype=np.float64)
                    for name, g in zip(argnames, oracle_g)]
    suffix = reproduction(fn, note=note, cotangent_seed=seed)
    for leaf, (name, g, ref, fl, arg) in enumerate(zip(argnames, got, oracle_g, floor_g, args)):
        if name is None:
            continue
        _assert_close(g, ref, fn=fn, dtype=np.asarray(arg).dtype, tol=tol, floor=np.asarray(fl),
                      kind="grad", what=f"grad {name}", suffix=suffix,
                      replay=Replay.of_vjp(fn, args, cotangents, kwargs, leaf))
    if check_custom_vjp and traced_program.defines_custom_vjp(fn.jaxpr(*args, **kwargs)):
        _assert_vjp_consistent_with_forward(fn, args, kwargs, suffix)


def _pullback(programs: CompiledPrograms, function):
    """The VJP of an oracle or floor as one compiled program: op-by-op it would compile
    every primitive of the forward and the backward separately, for every dtype."""
    program = _compiled(programs, function, "vjp")
    return lambda args, cotangents: program(args, cotangents)[1]


def _compiled(programs: CompiledPrograms, function, kind: str = "call"):
    """An oracle's or floor's forward ("call") or VJP ("vjp") as one jitted program.

    A Reference.bind partial is compiled as its function with its keyword arguments, so
    every test that binds the same ones shares one program (grading/compiled.py).
    """
    if isinstance(function, functools.partial) and not function.args:
        return programs.get(function.func, function.keywords, kind, checker=True)
    return programs.get(function, {}, kind, checker=True)


# check_grads compares the VJP's projection on a random direction with a central
# difference. Its float32 default step (1e-4) drowns a 65k-element attention in
# rounding noise (JAX's own flash attention fails by 0.16 at (1, 2, 256, 128));
# a 1e-3 step with a 1e-2 tolerance passes it, while a backward off by a constant
# factor or a missing term moves the projection by far more than 1%.
CHECK_GRADS_EPS = 1e-3
CHECK_GRADS_TOL = 1e-2


def _assert_vjp_consistent_with_forward(fn, args, kwargs, suffix) -> None:
    """jax.test_util.check_grads(f, args, order=1, modes=["rev"]), with f and its VJP run as the
    graded calls run: one compiled program each, the VJP's often the one the grads check above
    already compiled. Op by op, check_grads compiled every primitive of both on its own (28
    programs for one flash attention shape, most of chapter 13's grading time)."""
    import jax
    import jax.numpy as jnp
    from jax.test_util import check_vjp

    function = fn.resolve()
    programs = fn.context.programs
    forward, pullback = programs.get(function, kwargs, "call"), programs.get(function, kwargs, "vjp")
    args32 = tuple(jnp.asarray(a, jnp.float32) if _is_float(a) else a for a in args)

    def f_vjp(*primals):
        def vjp_of(cotangents):
            return pullback(primals, jax.tree.map(jnp.asarray, cotangents))[1]
        return forward(*primals), vjp_of

    try:
        # float32 at the graded precision: on a native TPU the default's one bf16 pass puts rounding noise
        # of a few parts in a thousand into every forward value, which a central difference divides by eps
        with context.graded_precision(args32):
            check_vjp(forward, f_vjp, args32, eps=CHECK_GRADS_EPS, atol=CHECK_GRADS_TOL,
                      rtol=CHECK_GRADS_TOL, err_msg="VJP")
    except AssertionError as error:
        first = "\n".join(str(error).strip().splitlines()[:4])
        raise WrongResult(
            f"{fn.display}: its custom_vjp backward disagrees with numerical differentiation of "
            f"its own forward (jax.test_util.check_grads, reverse mode, float32):\n  {first}"
            + suffix) from None
    except GradingOutcome:
        raise
    except Exception as error:  # the learner's code raised inside check_grads
        raise fn._outcome(error) from None


# ---------------------------------------------------------------- helpers


def _compare_trees(fn, got, expected, floor_out, *, names, tol, kind, what, suffix, replay=None) -> None:
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
            f"({', '.join(names)})." + suffix)
    for leaf, (name, g, e, f) in enumerate(zip(names, got_leaves, expected_leaves, want_leaves)):
        _assert_close(g, e, fn=fn, dtype=np.asarray(f).dtype, tol=tol, floor=np.asarray(f),
                      kind=kind, what=name, suffix=suffix, replay=replay and replay(leaf))


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


def _run_oracle(programs: CompiledPrograms, oracle, args, kwargs):
    import jax

    with jax.enable_x64(True), on_the_hosts_cpu():
        out = _run_test_code("oracle", _compiled(programs, oracle), _as_float64(args), kwargs)
        return jax.tree.map(lambda x: np.asarray(x, dtype=np.float64), out)


def on_the_hosts_cpu():
    """Where the float64 oracle runs: the host's CPU, whatever the run's default device (a TPU has no
    float64 arithmetic of its own); the default device where the CPU backend is off (JAX_PLATFORMS)."""
    import contextlib

    import jax

    if jax.default_backend() == "cpu":
        return contextlib.nullcontext()
    try:
        return jax.default_device(jax.devices("cpu")[0])
    except RuntimeError:
        return contextlib.nullcontext()


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


# Structural checks live in traced_program.py; re-exported as part of the checker's API.
assert_one_kernel = traced_program.assert_one_kernel
assert_uses_pallas = traced_program.assert_uses_pallas
count_pallas_calls = traced_program.count_pallas_calls
