"""Graded tests for ch12.hlo_dots: decode_hlo_dots(hlo).

Three sources of dots: the HLO of lowered programs (hypothesis draws the dot_general, so
its dimension numbers are known; one batched dot is written as a convolution whose operands
print their batch digits out of order and whose output is batch-last), XLA:CPU's optimized HLO
of the same programs (XLA transposes and reshapes operands first: the numbers are the
instruction's own), and XLA:TPU's convolutions from dumps compiled for a v5e. Every decoded einsum is run and
compared, in float64, with what the instruction computes: lax.dot_general for a dot,
lax.conv_general_dilated with the printed window and dim_labels for a convolution.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given
from jax import lax

from pytest_tpucourse import checks, ir, references
from pytest_tpucourse import strategies as tst

COURSE_ROOT = Path(__file__).resolve().parents[2]
DUMPS = COURSE_ROOT / "exercises" / "ch12" / "dumps"

# Corner cases: batch dims paired out of order, two contracting dims; a matrix-vector product.
TRANSPOSED = ((3, 4, 2, 5, 6), (5, 6, 3, 2, 4, 7), (((1, 3), (4, 0)), ((2, 0), (3, 2))))
MATVEC = ((6, 5), (5,), (((1,), (0,)), ((), ())))

# XLA:TPU's form with two batch dimensions, from attention's q·kᵀ at (2, 4, 256, 128) bf16,
# compiled for a v5e by libtpu 0.0.42.1 (jax 0.10.2), 2026-11-30. Only here, not in dumps/.
TWO_BATCH_DIMS = """\
%fused_computation.1 (param_0.3: bf16[2,4,256,128], param_1.3: bf16[2,4,512,128]) -> f32[2,4,256,512] {
  %param_0.3 = bf16[2,4,256,128]{3,2,1,0:T(8,128)(2,1)S(1)} parameter(0)
  %fusion.1 = bf16[2,4,256,128]{3,2,1,0:T(8,128)(2,1)} fusion(%param_0.3), kind=kLoop, calls=%bitcast_fusion
  %param_1.3 = bf16[2,4,512,128]{3,2,1,0:T(8,128)(2,1)} parameter(1)
  %fusion.2 = bf16[2,4,512,128]{3,2,1,0:T(8,128)(2,1)} fusion(%param_1.3), kind=kLoop, calls=%bitcast_fusion.1
  ROOT %convolution-base-dilated.1 = f32[2,4,256,512]{3,2,1,0:T(8,128)} convolution(%fusion.1, %fusion.2), window={size=2x4 stride=1x3 lhs_dilate=2x4}, dim_labels=01bf_01oi->01bf
}
"""


# XLA:TPU's convolution form of a dot_general with two batch dimensions, written through
# lax.conv_general_dilated so that every label can sit anywhere (each window lines up only equal batch
# positions: size B, stride B - 1, lhs_dilate B). Its operands print their digits out of digit order and
# in different orders (XLA:TPU printed 1fb0_o01i->01bf for einsum("mabk,bkna->nabm") and 01fb_10oi->01bf
# for "abmk,bakn->nbam", libtpu 0.0.42.1), and its output is batch-last.
BATCH_LAST = ("1fb0", "o10i", "fb10")


def _convolution_as_dot(lhs_labels, rhs_labels, out_labels, batch=(2, 3), free=(8, 8), depth=16):
    """(program, lhs, rhs): lax.conv_general_dilated as a batched dot with these dim_labels."""
    def spec(labels, first, second):
        return (labels.index(first), labels.index(second), labels.index("0"), labels.index("1"))

    def shape(labels, sizes):
        return tuple(sizes[c] for c in labels)

    numbers = lax.ConvDimensionNumbers(spec(lhs_labels, "b", "f"), spec(rhs_labels, "o", "i"),
                                       spec(out_labels, "b", "f"))

    def program(x, y):
        return lax.conv_general_dilated(x, y, tuple(b - 1 for b in batch), [(0, 0)] * len(batch),
                                        lhs_dilation=batch, dimension_numbers=numbers)

    digits = {str(k): b for k, b in enumerate(batch)}
    lhs = shape(lhs_labels, {"b": free[0], "f": depth, **digits})
    rhs = shape(rhs_labels, {"o": free[1], "i": depth, **digits})
    return program, lhs, rhs


def _reference(instruction, numbers):
    """What the instruction computes, as a Reference: float64 oracle, float32 floor."""
    if instruction.opcode == "dot":
        dn = ((numbers["lhs_contracting"], numbers["rhs_contracting"]), (numbers["lhs_batch"], numbers["rhs_batch"]))

        def compute(x, y, precision=None):
            return lax.dot_general(x, y, dn, precision=precision)
    else:
        labels = instruction.attribute("dim_labels")
        lhs_l, rest = labels.split("_")
        rhs_l, out_l = rest.split("->")
        window = ir.convolution_window(instruction)

        def spec(letters, first, second):
            digits = sorted(c for c in letters if c.isdigit())
            return (letters.index(first), letters.index(second), *(letters.index(d) for d in digits))

        numbers_ = lax.ConvDimensionNumbers(spec(lhs_l, "b", "f"), spec(rhs_l, "o", "i"), spec(out_l, "b", "f"))
        spatial = len([c for c in lhs_l if c.isdigit()])

        def compute(x, y, precision=None):
            return lax.conv_general_dilated(
                x, y, window.get("stride", (1,) * spatial), [(0, 0)] * spatial,
                lhs_dilation=window.get("lhs_dilate", (1,) * spatial), dimension_numbers=numbers_,
                precision=precision)
    return references.Reference(f"{instruction.name} as XLA computes it",
                                lambda x, y: compute(x, y, lax.Precision.HIGHEST),
                                lambda x, y: compute(x, y).astype(x.dtype))


def _check(impl, hlo, source, truth=None):
    """decode_hlo_dots on `hlo` against the course's reading, then every einsum run."""
    fn = impl.hlo_dots.decode_hlo_dots
    for seed, (mine, instruction, numbers, spec) in enumerate(_read_as_the_course_does(fn, fn(hlo), hlo, source,
                                                                                       truth)):
        x = tst.random_array(numbers["lhs_shape"], "float32", seed)
        y = tst.random_array(numbers["rhs_shape"], "float32", seed + 100)
        checks.assert_matches_reference(
            checks.graded(lambda a, b, s=spec: jnp.einsum(s, a, b), f"jnp.einsum({spec!r}) from {fn.display}"),
            (x, y), reference=_reference(instruction, numbers), require_kernel=False,
            note=f"the einsum it gives for {mine['name']} in {source}")


def _read_as_the_course_does(fn, got, hlo, source, truth):
    """(decoded dot, its instruction, the course's numbers for it, its einsum spec) of each dot, once
    the decoded dots are the course's reading of the module and the truth where known."""
    module = ir.parse(hlo)
    instructions = ir.dots(module)
    want = [ir.dot_numbers(module, i) for i in instructions]
    ir.assert_dots_match(fn, got, want, dump=source)
    for mine, instruction, numbers in zip(got, instructions, want):
        if truth is not None:
            assert tuple(map(tuple, _numbers(mine))) == tuple(map(tuple, truth)), (
                f"{fn.display} on {source}: {mine['name']} decodes to {_numbers(mine)}; the program's "
                f"dot_general has {truth}")
        spec = mine.get("einsum")
        assert isinstance(spec, str) and "->" in spec, (
            f"{fn.display}: {mine['name']}'s einsum should be a spec like 'abc,acd->abd', got {spec!r}")
        yield mine, instruction, numbers, spec


def _numbers(decoded):
    return (decoded.get("lhs_batch"), decoded.get("rhs_batch"), decoded.get("lhs_contracting"),
            decoded.get("rhs_contracting"))


def _operands(problem, seed):
    """On the CPU even on a TPU VM: these tests read XLA:CPU's dots (the TPU's come from dumps/)."""
    lhs_shape, rhs_shape, _ = problem
    cpu = jax.devices("cpu")[0]
    return (jax.device_put(tst.random_array(lhs_shape, "float32", seed), cpu),
            jax.device_put(tst.random_array(rhs_shape, "float32", seed + 1), cpu))


@given(problem=tst.dot_general_problems(), seed=tst.seeds())
@example(problem=TRANSPOSED, seed=0)
@example(problem=MATVEC, seed=0)
def test_decode_the_dot_of_a_lowered_program(impl, problem, seed):
    """The HLO of the lowered program: the dot carries the drawn numbers, operands are the arguments."""
    (lc, rc), (lb, rb) = problem[2]
    x, y = _operands(problem, seed)
    hlo = jax.jit(lambda a, b: lax.dot_general(a, b, problem[2])).lower(x, y).as_text(dialect="hlo")
    _check(impl, hlo, f"the HLO of lax.dot_general(x{problem[0]}, y{problem[1]}, {problem[2]})",
           truth=(lb, rb, lc, rc))


@given(problem=tst.dot_general_problems(), seed=tst.seeds())
@example(problem=TRANSPOSED, seed=0)
def test_decode_the_dots_xla_cpu_made(impl, problem, seed):
    """Optimized for the CPU: transposed, reshaped operands; the dot's numbers are its own."""
    x, y = _operands(problem, seed)
    hlo = jax.jit(lambda a, b: lax.dot_general(a, b, problem[2])).lower(x, y).compile().as_text()
    _check(impl, hlo, f"XLA:CPU's optimized HLO of lax.dot_general(x{problem[0]}, y{problem[1]}, {problem[2]})")


def test_decode_batch_digits_out_of_order_and_a_batch_last_output(impl):
    """The digits pair by their number, wherever each side prints them; the output follows its labels."""
    program, lhs, rhs = _convolution_as_dot(*BATCH_LAST)
    x, y = _operands((lhs, rhs, None), 5)
    hlo = jax.jit(program).lower(x, y).as_text(dialect="hlo")
    _check(impl, hlo, f"the HLO of a batched dot written as a convolution, dim_labels={'_'.join(BATCH_LAST[:2])}"
                      f"->{BATCH_LAST[2]}", truth=((3, 0), (2, 1), (1,), (3,)))


def test_decode_tpu_convolutions(impl):
    """XLA:TPU writes dot_generals as convolutions; the programs' own numbers are known."""
    dump = ir.read_dump(DUMPS / "v5e_dots.hlo.txt", COURSE_ROOT)
    _check(impl, dump.text, f"dumps/v5e_dots.hlo.txt ({dump.header[:80]}...)")
    # programs.dots: the operands reach each convolution unchanged, so its numbers are the program's.
    truth = {(4, 256, 128): ((0,), (0,), (2,), (1,)), (256, 384): ((), (), (1,), (0,)),
             (384, 256): ((), (), (0,), (1,)), (4, 128, 384): ((1,), (0,), (2,), (2,)),
             (4, 384, 128): ((0,), (1,), (2,), (2,)), (512, 512): ((), (), (0,), (0,))}
    decoded = impl.hlo_dots.decode_hlo_dots(dump.text)
    for dot in decoded:
        assert tuple(map(tuple, _numbers(dot))) == truth[tuple(dot["out_shape"])], (
            f"{impl.hlo_dots.decode_hlo_dots.display}: {dot['name']} decodes to {_numbers(dot)}; the "
            f"program's dot_general with output {tuple(dot['out_shape'])} has {truth[tuple(dot['out_shape'])]}")


def test_decode_two_batch_dims_on_tpu(impl):
    _check(impl, TWO_BATCH_DIMS, "a v5e convolution with two batch dimensions (attention's q·kᵀ)",
           truth=((0, 1), (0, 1), (3,), (3,)))


def test_decode_the_matmul_beside_a_pallas_kernel(impl):
    dump = ir.read_dump(DUMPS / "v5e_mlp_block.hlo.txt", COURSE_ROOT)
    _check(impl, dump.text, "dumps/v5e_mlp_block.hlo.txt", truth=((), (), (1,), (0,)))


def test_a_module_without_dots(impl):
    hlo = jax.jit(lambda a: jnp.tanh(a) * 2).lower(np.ones((8, 8), np.float32)).compile().as_text()
    got = impl.hlo_dots.decode_hlo_dots(hlo)
    assert got == [], f"{impl.hlo_dots.decode_hlo_dots.display}: tanh(x) * 2 has no dot, got {got!r}"


def _decodes(got, expected):
    """None when the decoded dots are the course's reading of the module, the truth where known,
    and every einsum computes what its instruction does (run here, in the grader)."""
    hlo, source, truth = expected
    fn = checks.graded(lambda *args: None, "decode_hlo_dots()")
    for seed, (mine, instruction, numbers, spec) in enumerate(_read_as_the_course_does(fn, got, hlo, source, truth)):
        x = np.asarray(tst.random_array(numbers["lhs_shape"], "float32", seed), np.float64)
        y = np.asarray(tst.random_array(numbers["rhs_shape"], "float32", seed + 100), np.float64)
        reference = _reference(instruction, numbers)
        with jax.enable_x64(True):
            want_out = np.asarray(reference.oracle(jnp.asarray(x), jnp.asarray(y)), np.float64)
            got_out = np.asarray(jnp.einsum(spec, jnp.asarray(x), jnp.asarray(y),
                                            precision=lax.Precision.HIGHEST), np.float64)
        why = checks.trusted.judge_array(got_out.astype(np.float32), want_out, None, dtype="float32",
                                         what=f"jnp.einsum({spec!r}) for {mine['name']}")
        assert why is None, why


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): the HLO of dot_generals the grader
    draws, lowered and optimized here, and one v5e dump."""
    cases = []
    for optimized in (False, True):
        lhs_shape, rhs_shape, dn = _draw_problem(rng)
        x, y = _operands((lhs_shape, rhs_shape, dn), checks.trusted.seed(rng))
        hlo = checks.trusted.program_text(lambda a, b: lax.dot_general(a, b, dn), x, y, optimized=optimized)
        source = f"{'XLA:CPU optimized' if optimized else 'the'} HLO of lax.dot_general(x{lhs_shape}, y{rhs_shape}, {dn})"
        (lc, rc), (lb, rb) = dn
        cases.append(checks.trusted.exact("decode_hlo_dots", (hlo,), expected=(hlo, source, None if optimized else
                                                                                  (lb, rb, lc, rc)),
                                          compare=checks.trusted.passes(_decodes), label=f"decode_hlo_dots({source})"))
    cases.append(checks.trusted.exact("decode_hlo_dots", (TWO_BATCH_DIMS,),
                                      expected=(TWO_BATCH_DIMS, "a v5e convolution with two batch dimensions",
                                                ((0, 1), (0, 1), (3,), (3,))),
                                      compare=checks.trusted.passes(_decodes),
                                      label="decode_hlo_dots(a v5e convolution with two batch dimensions)"))
    return cases


def _draw_problem(rng):
    """(lhs_shape, rhs_shape, dimension_numbers) as tst.dot_general_problems draws them."""
    kinds = {kind: int(rng.integers(0, 3)) for kind in ("batch", "contract", "lhs", "rhs")}
    size = {(kind, i): int(rng.integers(1, 8)) for kind, n in kinds.items() for i in range(n)}
    paired = [(k, i) for k in ("batch", "contract") for i in range(kinds[k])]
    lhs = paired + [("lhs", i) for i in range(kinds["lhs"])]
    rhs = paired + [("rhs", i) for i in range(kinds["rhs"])]
    lhs, rhs = [lhs[i] for i in rng.permutation(len(lhs))], [rhs[i] for i in rng.permutation(len(rhs))]

    def positions(side, kind):
        return tuple(side.index((kind, i)) for i in range(kinds[kind]))

    numbers = ((positions(lhs, "contract"), positions(rhs, "contract")),
               (positions(lhs, "batch"), positions(rhs, "batch")))
    return tuple(size[d] for d in lhs), tuple(size[d] for d in rhs), numbers


TRUSTED = checks.trusted.Cases(_trusted_cases)
