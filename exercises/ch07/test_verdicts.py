"""Graded tests for ch07.verdicts: predict_verdict(body, shape, dtype, block, chip).

Every prediction is checked against the toolchain itself, run on the kernel it describes: Pallas'
TPU lowering always, and with the tpu-compile extra the real Mosaic and LLO compiler too, at the
installed libtpu's release. The catalogue's entries are also predicted for every other libtpu the
course measured and judged against the verdict measured with it (a column per release; the column
of the installed release is checked against its compiler here), so a prediction right for one
compiler only fails on every machine. Without the extra, the installed release's prediction is
graded on the lowering's part (a kernel the lowering accepts counts as "ok" there) and every
measured release's against its column.
"""

import textwrap

import jax
import jax.numpy as jnp
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from jax.experimental import pallas as pl

from pytest_tpucourse import checks, tpu

BODIES = {  # what the kernel does to its block x; each stores the result in its output block
    "copy": lambda x: x,
    "double": lambda x: x * jnp.asarray(2, x.dtype),
    "cumsum": lambda x: jnp.cumsum(x, axis=-1),
    "matmul": lambda x: jnp.dot(x, jnp.ones((x.shape[1], x.shape[1]), x.dtype)),  # result in x's dtype
    "split_lanes": lambda x: x.reshape(2 * x.shape[0], x.shape[1] // 2),
}
LOWERING_VERDICTS = ("ok", "block shape", "unsupported op")
VERDICTS = LOWERING_VERDICTS + ("tiling", "mosaic", "vmem")

# ((body, shape, dtype, block, chip), the verdict with each libtpu of tpu.MEASURED_LIBTPU: 0.0.42, 0.0.50).
# Each verdict was measured with libtpu 0.0.42.1 (jax 0.10.2) and 0.0.50.1 (jax 0.12) before it shipped
# (the chapter's README has the table, a column per libtpu); the tests ask the installed toolchain
# again, and it must still give its column.
CATALOGUE = (
    (("copy", (64, 256), "float32", (8, 128), "v5e"), ("ok", "ok")),
    (("copy", (64, 256), "float32", (4, 128), "v5e"), ("block shape", "block shape")),
    (("copy", (60, 200), "float32", (60, 200), "v5e"), ("ok", "ok")),
    (("copy", (64, 256), "bfloat16", (8, 128), "v5e"), ("ok", "ok")),
    (("copy", (64, 256), "int8", (8, 128), "v5e"), ("tiling", "ok")),
    (("copy", (40, 256), "int8", (8, 128), "v5e"), ("ok", "ok")),
    (("copy", (64, 256), "int8", (32, 128), "v5e"), ("ok", "ok")),
    (("double", (64, 256), "int8", (32, 128), "v5e"), ("mosaic", "mosaic")),
    (("double", (64, 256), "int32", (8, 128), "v5e"), ("ok", "ok")),
    (("cumsum", (64, 256), "float32", (8, 128), "v5e"), ("unsupported op", "unsupported op")),
    # int8 blocks off the (32, 128) tiling, in bodies the lowering refuses before any compiler sees them
    (("cumsum", (64, 256), "int8", (8, 128), "v5e"), ("unsupported op", "unsupported op")),
    (("matmul", (64, 128), "int8", (8, 128), "v5e"), ("unsupported op", "unsupported op")),
    (("matmul", (64, 128), "bfloat16", (16, 128), "v5e"), ("unsupported op", "unsupported op")),
    (("matmul", (64, 128), "float32", (8, 128), "v5e"), ("ok", "ok")),
    (("matmul", (64, 128), "int32", (8, 128), "v5e"), ("mosaic", "mosaic")),  # lowers; Mosaic has no i32 matmul
    (("split_lanes", (64, 128), "float32", (8, 128), "v5e"), ("mosaic", "ok")),
    (("double", (4096, 1024), "float32", (2048, 1024), "v5e"), ("vmem", "vmem")),
    (("double", (4096, 1024), "float32", (2048, 1024), "v6e"), ("ok", "ok")),
)


def catalogue_kernel(body, shape, block):
    """One pallas_call over a grid of blocks, applying BODIES[body] to each."""
    split = body == "split_lanes"
    out_shape = (2 * shape[0], shape[1] // 2) if split else shape
    out_block = (2 * block[0], block[1] // 2) if split else block

    def kernel(x_ref, o_ref):
        o_ref[...] = BODIES[body](x_ref[...])

    def call(x):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(out_shape, x.dtype),
            grid=(shape[0] // block[0], shape[1] // block[1]),
            in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
            out_specs=pl.BlockSpec(out_block, lambda i, j: (i, j)),
        )(x)
    return call


def toolchain_verdict(body, shape, dtype, block, chip, *, compile: bool) -> tuple[str, str]:
    """(verdict, the toolchain's own words) for the described kernel."""
    fn, x = catalogue_kernel(body, shape, block), jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
    try:
        tpu.lower_for_tpu(fn, x, chip=chip)
    except Exception as error:
        return ("block shape" if "block shape" in str(error) else "unsupported op"), checks.toolchain_words(error, 1)
    if not compile:
        return "ok", "the lowering accepts it"
    try:
        tpu.compile_for(fn, x, chip=chip)
    except tpu.TpuCompileError as error:
        return error.kind, checks.toolchain_words(error)
    return "ok", "the compiler accepts it"


def check(impl, entry, *, compile: bool, measured: str | None = None):
    """The prediction for the installed release against the toolchain at hand. `measured`: the
    catalogue's verdict for this release, which its compiler must still give (else the catalogue
    is out of date: the course's error, not the learner's)."""
    body, shape, dtype, block, chip = entry
    libtpu = tpu.libtpu_release() or tpu.NEWEST_MEASURED
    predicted = impl.verdicts.predict_verdict(body, shape, dtype, block, chip, libtpu=libtpu)
    display = impl.verdicts.predict_verdict.display
    call = f"predict_verdict({body!r}, {shape}, {dtype!r}, {block}, {chip!r}, libtpu={libtpu})"
    assert predicted in VERDICTS, f"{display}: {call} returned {predicted!r}, not one of {VERDICTS}"
    verdict, words = toolchain_verdict(*entry, compile=compile)
    if compile and measured is not None and verdict != measured:
        raise checks.CheckerError(
            f"the chapter's catalogue says {measured!r} for {entry} with libtpu {_release(libtpu)}; the "
            f"installed libtpu {tpu.libtpu_version()} says {verdict!r}: the catalogue is out of date, not your "
            f"prediction:\n{textwrap.indent(words, '  ')}")
    seen = predicted if compile or predicted in LOWERING_VERDICTS else "ok"
    stage = ("the lowering and the compiler" if compile
             else "the lowering" + ("" if tpu.available() else " (no libtpu here)"))
    assert seen == verdict, (
        f"{display}: {call} predicted {predicted!r}; {stage} {'say' if compile else 'says'} {verdict!r}:\n"
        + textwrap.indent(words, "  ")
        + (f"\n  {tpu.unmeasured_line()}" if compile and not tpu.measured() else ""))


def check_column(impl, entry, release, verdict):
    """The prediction for a libtpu the course measured and this machine does not run, against its column."""
    body, shape, dtype, block, chip = entry
    predicted = impl.verdicts.predict_verdict(body, shape, dtype, block, chip, libtpu=release)
    call = f"predict_verdict({body!r}, {shape}, {dtype!r}, {block}, {chip!r}, libtpu={release})"
    assert predicted == verdict, (
        f"{impl.verdicts.predict_verdict.display}: {call} predicted {predicted!r}; libtpu {_release(release)} "
        f"says {verdict!r} (the chapter's catalogue, a column per libtpu, each measured with its compiler "
        f"and checked against it where it is installed)")


def _release(release) -> str:
    return ".".join(map(str, release))


@pytest.mark.parametrize("entry, columns", CATALOGUE,
                         ids=[f"{e[0]}-{e[2]}-{e[3][0]}x{e[3][1]}-{e[4]}" for e, _ in CATALOGUE])
def test_catalogue(impl, entry, columns):
    measured = dict(zip(tpu.MEASURED_LIBTPU, columns, strict=True))
    installed = tpu.libtpu_release() if tpu.available() else None
    check(impl, entry, compile=installed is not None, measured=measured.get(installed))
    for release, verdict in measured.items():
        if release != installed:
            check_column(impl, entry, release, verdict)


@st.composite
def copy_blocks(draw):
    """A copy kernel with a drawn 2-D block, legal or not: the lowering's rule, in every corner."""
    dtype = draw(st.sampled_from(("float32", "bfloat16")))
    rows = draw(st.sampled_from((1, 4, 8, 12, 16, 24, 40)))
    lanes = draw(st.sampled_from((64, 100, 128, 200, 256, 384)))
    grid = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    shape = (rows * grid[0], lanes * grid[1])
    return "copy", shape, dtype, (rows, lanes), "v5e"


@given(entry=copy_blocks())
@example(entry=("copy", (12, 256), "float32", (12, 128), "v5e"))  # a whole dimension, not the whole array
def test_block_rule_on_drawn_blocks(impl, entry):
    check(impl, entry, compile=False)


def _seen_by_the_lowering(got, verdict):
    """None when the prediction is the lowering's verdict (a later stage's counts as "ok" there)."""
    if got not in VERDICTS:
        return f"returned {got!r}, not one of {VERDICTS}"
    seen = got if got in LOWERING_VERDICTS else "ok"
    return None if seen == verdict else f"predicted {got!r}; the lowering says {verdict!r}"


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): copy blocks the grader draws and one
    catalogue entry, judged by the TPU lowering in the grader's process (the compiler's later
    stages are the graded tests')."""
    libtpu = tpu.libtpu_release() or tpu.NEWEST_MEASURED
    entries = []
    for _ in range(4):
        rows, lanes = int(rng.choice((1, 4, 8, 12, 16, 24, 40))), int(rng.choice((64, 100, 128, 200, 256, 384)))
        grid = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
        entries.append(("copy", (rows * grid[0], lanes * grid[1]), str(rng.choice(("float32", "bfloat16"))),
                        (rows, lanes), "v5e"))
    entries.append(CATALOGUE[int(rng.integers(len(CATALOGUE)))][0])  # (entry, verdict columns)
    return [checks.trusted.exact("predict_verdict", entry, kwargs=dict(libtpu=libtpu),
                                 expected=toolchain_verdict(*entry, compile=False)[0], compare=_seen_by_the_lowering)
            for entry in entries]


TRUSTED = checks.trusted.Cases(_trusted_cases)
