"""Graded tests for ch03.dot_general: parse_dot_generals(text), dot_general_to_einsum(...).

Hypothesis draws random dot_generals: 0-2 batch, 0-2 contracting and 0-2 free
dimensions per side, laid out in random orders on each operand.
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from jax import lax

from pytest_tpucourse import checks, references
from pytest_tpucourse import strategies as tst

BATCH_SIZES, CONTRACT_SIZES, FREE_SIZES = (2, 3), (4, 5), (1, 6, 7)


@st.composite
def dot_problems(draw):
    """(lhs_shape, rhs_shape, dimension_numbers) of one random dot_general."""
    nb, nc, nl, nr = (draw(st.integers(0, 2)) for _ in range(4))
    batch = [draw(st.sampled_from(BATCH_SIZES)) for _ in range(nb)]
    contract = [draw(st.sampled_from(CONTRACT_SIZES)) for _ in range(nc)]
    lhs_dims = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("l", i) for i in range(nl)]
    rhs_dims = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("r", i) for i in range(nr)]
    lhs_dims = draw(st.permutations(lhs_dims))
    rhs_dims = draw(st.permutations(rhs_dims))
    free = {d: draw(st.sampled_from(FREE_SIZES)) for d in lhs_dims + rhs_dims if d[0] in "lr"}
    size = {**{("b", i): s for i, s in enumerate(batch)}, **{("c", i): s for i, s in enumerate(contract)}, **free}
    dn = ((tuple(lhs_dims.index(("c", i)) for i in range(nc)), tuple(rhs_dims.index(("c", i)) for i in range(nc))),
          (tuple(lhs_dims.index(("b", i)) for i in range(nb)), tuple(rhs_dims.index(("b", i)) for i in range(nb))))
    return tuple(size[d] for d in lhs_dims), tuple(size[d] for d in rhs_dims), dn


# Corner cases: batch dims neither leading nor in the same order on both sides, two
# contracting dims paired out of order; an outer product; a vector dot (scalar result).
TRANSPOSED = ((3, 4, 2, 5, 6), (5, 6, 3, 2, 4, 7), (((1, 3), (4, 0)), ((2, 0), (3, 2))))
OUTER = ((3, 6), (7,), (((), ()), ((), ())))
VECTOR_DOT = ((5,), (5,), (((0,), (0,)), ((), ())))


def _dims(dn):
    (lc, rc), (lb, rb) = dn
    return dict(lhs_batch=lb, rhs_batch=rb, lhs_contracting=lc, rhs_contracting=rc)


def _operands(lhs_shape, rhs_shape, seed):
    return tst.random_array(lhs_shape, "float32", seed), tst.random_array(rhs_shape, "float32", seed + 1)


def _text(lhs, rhs, dn):
    return jax.jit(lambda x, y: lax.dot_general(x, y, dn)).lower(lhs, rhs).as_text()


def _reference(dn):
    return references.Reference(
        f"lax.dot_general(dimension_numbers={dn})",
        lambda x, y: lax.dot_general(x, y, dn, precision=lax.Precision.HIGHEST),
        lambda x, y: lax.dot_general(x, y, dn, preferred_element_type=jnp.float32).astype(x.dtype))


def _check_parsed(fn, parsed, want, note):
    if not (isinstance(parsed, list) and len(parsed) == len(want)):
        checks.fail(fn, f"{fn.display} should return a list of {len(want)} dict(s), one per dot_general, got "
                        f"{type(parsed).__name__}{f' of {len(parsed)}' if isinstance(parsed, list) else ''}",
                    note=note)
    for k, (got, expected) in enumerate(zip(parsed, want)):
        if not isinstance(got, dict):
            checks.fail(fn, f"{fn.display}: dot_general #{k} should be a dict, got {type(got).__name__}", note=note)
        read = {key: tuple(got[key]) if key in got else "missing" for key in expected}
        checks.assert_equal(read, {key: tuple(value) for key, value in expected.items()}, fn=fn,
                            what=f"dot_general #{k} as read", note=note)


@given(problem=dot_problems(), seed=tst.seeds())
@example(problem=TRANSPOSED, seed=0)
@example(problem=OUTER, seed=0)
@example(problem=VECTOR_DOT, seed=0)
def test_parse_dot_generals(impl, problem, seed):
    lhs_shape, rhs_shape, dn = problem
    lhs, rhs = _operands(lhs_shape, rhs_shape, seed)
    text = _text(lhs, rhs, dn)
    fn = impl.dot_general.parse_dot_generals
    parsed = fn(text)
    out_shape = tuple(jax.eval_shape(lambda x, y: lax.dot_general(x, y, dn), lhs, rhs).shape)
    want = dict(_dims(dn), lhs_shape=lhs_shape, rhs_shape=rhs_shape, out_shape=out_shape)
    _check_parsed(fn, parsed, [want], f"the text is the StableHLO of lax.dot_general(x, y, {dn}) on x "
                                      f"{lhs_shape}, y {rhs_shape}")


def test_parse_dot_generals_in_attention(impl):
    """Two dot_generals among a hundred other lines, in program order."""
    q = tst.random_array((2, 4, 16, 8), "float32", 0)
    k = tst.random_array((2, 4, 24, 8), "float32", 1)
    text = jax.jit(lambda q, k, v: references.attention_floor(q, k, v)).lower(q, k, k).as_text()
    fn = impl.dot_general.parse_dot_generals
    parsed = fn(text)
    scores = dict(lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contracting=(3,), rhs_contracting=(3,),
                  lhs_shape=(2, 4, 16, 8), rhs_shape=(2, 4, 24, 8), out_shape=(2, 4, 16, 24))
    pv = dict(lhs_batch=(0, 1), rhs_batch=(0, 1), lhs_contracting=(3,), rhs_contracting=(2,),
              lhs_shape=(2, 4, 16, 24), rhs_shape=(2, 4, 24, 8), out_shape=(2, 4, 16, 8))
    _check_parsed(fn, parsed, [scores, pv], "the text is the StableHLO of attention on q (2, 4, 16, 8), "
                                            "k and v (2, 4, 24, 8)")


def _check_einsum(impl, problem, seed):
    lhs_shape, rhs_shape, dn = problem
    fn = impl.dot_general.dot_general_to_einsum
    spec = fn(len(lhs_shape), len(rhs_shape), dn)
    if not (isinstance(spec, str) and "->" in spec):
        checks.fail(fn, f"{fn.display} should return an explicit einsum spec like 'abc,acd->abd', got {spec!r}")
    lhs, rhs = _operands(lhs_shape, rhs_shape, seed)
    checks.assert_matches_reference(
        checks.graded(lambda x, y: jnp.einsum(spec, x, y), f"jnp.einsum({spec!r}) from {fn.display}"),
        (lhs, rhs), reference=_reference(dn), require_kernel=False)


@given(problem=dot_problems(), seed=tst.seeds())
@example(problem=TRANSPOSED, seed=0)
@example(problem=OUTER, seed=0)
@example(problem=VECTOR_DOT, seed=0)
def test_dot_general_to_einsum(impl, problem, seed):
    _check_einsum(impl, problem, seed)


@given(problem=dot_problems(), seed=tst.seeds())
@example(problem=TRANSPOSED, seed=1)
def test_decode_any_dot_general(impl, problem, seed):
    """StableHLO text -> your parser -> your einsum -> the same numbers as lax.dot_general."""
    lhs_shape, rhs_shape, dn = problem
    lhs, rhs = _operands(lhs_shape, rhs_shape, seed)
    parsed = impl.dot_general.parse_dot_generals(_text(lhs, rhs, dn))
    if not (isinstance(parsed, list) and len(parsed) == 1 and isinstance(parsed[0], dict)):
        checks.fail(impl.dot_general.parse_dot_generals,
                    f"{impl.dot_general.parse_dot_generals.display} should return one dict here, got {parsed!r}")
    p = parsed[0]
    decoded = ((tuple(p["lhs_contracting"]), tuple(p["rhs_contracting"])),
               (tuple(p["lhs_batch"]), tuple(p["rhs_batch"])))
    _check_einsum(impl, (lhs_shape, rhs_shape, decoded), seed)


def _draw_problem(rng):
    """A random dot_general as dot_problems draws one, from the grader's generator."""
    nb, nc, nl, nr = (int(rng.integers(0, 3)) for _ in range(4))
    batch = [int(rng.choice(BATCH_SIZES)) for _ in range(nb)]
    contract = [int(rng.choice(CONTRACT_SIZES)) for _ in range(nc)]
    lhs_dims = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("l", i) for i in range(nl)]
    rhs_dims = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("r", i) for i in range(nr)]
    lhs_dims = [lhs_dims[i] for i in rng.permutation(len(lhs_dims))]
    rhs_dims = [rhs_dims[i] for i in rng.permutation(len(rhs_dims))]
    free = {d: int(rng.choice(FREE_SIZES)) for d in lhs_dims + rhs_dims if d[0] in "lr"}
    size = {**{("b", i): s for i, s in enumerate(batch)}, **{("c", i): s for i, s in enumerate(contract)}, **free}
    dn = ((tuple(lhs_dims.index(("c", i)) for i in range(nc)), tuple(rhs_dims.index(("c", i)) for i in range(nc))),
          (tuple(lhs_dims.index(("b", i)) for i in range(nb)), tuple(rhs_dims.index(("b", i)) for i in range(nb))))
    return tuple(size[d] for d in lhs_dims), tuple(size[d] for d in rhs_dims), dn


def _as_read(got, expected):
    """None when the parsed dot_generals are the expected ones (sequences read as tuples)."""
    if not (isinstance(got, (list, tuple)) and len(got) == len(expected)):
        return f"returned {got!r:.200}; expected a list of {len(expected)} dict(s)"
    for k, (one, want) in enumerate(zip(got, expected)):
        if not isinstance(one, dict):
            return f"dot_general #{k} is a {type(one).__name__}, not a dict"
        read = {key: tuple(one[key]) if isinstance(one.get(key), (list, tuple)) else one.get(key, "missing")
                for key in want}
        if read != {key: tuple(value) for key, value in want.items()}:
            return f"dot_general #{k} reads {read}; expected {want}"
    return None


def _einsum_agrees(got, problem):
    """None when jnp.einsum(got) computes the problem's dot_general (run here, in the grader)."""
    lhs_shape, rhs_shape, dn = problem
    if not (isinstance(got, str) and "->" in got):
        return f"returned {got!r:.100}; expected an explicit einsum spec like 'abc,acd->abd'"
    lhs, rhs = (jnp.asarray(np.random.default_rng(7).standard_normal(s), jnp.float32) for s in (lhs_shape, rhs_shape))
    try:
        out = np.asarray(jnp.einsum(got, lhs, rhs, precision=lax.Precision.HIGHEST), np.float64)
    except Exception as error:
        return f"jnp.einsum({got!r}) raised {type(error).__name__}: {error}"
    want = np.asarray(lax.dot_general(lhs, rhs, dn, precision=lax.Precision.HIGHEST), np.float64)
    return checks.trusted.judge_array(out.astype(np.float32), want, None, dtype="float32",
                                      what=f"jnp.einsum({got!r})")


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): dot_generals drawn by the grader."""
    cases = []
    for _ in range(3):
        lhs_shape, rhs_shape, dn = _draw_problem(rng)
        lhs, rhs = _operands(lhs_shape, rhs_shape, checks.trusted.seed(rng))
        out_shape = tuple(jax.eval_shape(lambda x, y: lax.dot_general(x, y, dn), lhs, rhs).shape)
        want = dict(_dims(dn), lhs_shape=lhs_shape, rhs_shape=rhs_shape, out_shape=out_shape)
        cases.append(checks.trusted.exact("parse_dot_generals", (_text(lhs, rhs, dn),), expected=[want],
                                          compare=_as_read, label=f"parse_dot_generals(the StableHLO of "
                                          f"lax.dot_general on {lhs_shape}, {rhs_shape}, {dn})"))
        cases.append(checks.trusted.exact("dot_general_to_einsum", (len(lhs_shape), len(rhs_shape), dn),
                                          expected=(lhs_shape, rhs_shape, dn), compare=_einsum_agrees))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
