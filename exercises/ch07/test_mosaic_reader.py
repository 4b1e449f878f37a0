"""Graded tests for ch07.mosaic_reader: read_kernel(text), on the Mosaic modules of real kernels.

The texts are the pre-layout Mosaic modules the package decodes from each pallas_call's TPU
lowering (tpu.kernels). What read_kernel returns is checked against the pallas_call itself
(its grid mapping, its kernel jaxpr's scratch refs, its compiler params) and, for the op counts,
against MLIR's own walk of the parsed module.
"""

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

from pytest_tpucourse import checks, ir, public_kernels, tpu

MLIR_TYPES = {"float32": "f32", "bfloat16": "bf16", "int32": "i32", "int8": "i8", "int16": "i16",
              "dma_sem": "!tpu.dma_semaphore", "semaphore": "!tpu.semaphore"}
KEYS = ("name", "grid", "dimension_semantics", "windows", "scalar_prefetch", "scratch", "op_counts")


def expected(fn, args, kwargs=None) -> list[dict]:
    """read_kernel's answer for each pallas_call of fn(*args), from the pallas_call and MLIR."""
    kwargs = kwargs or {}
    with pltpu.force_tpu_interpret_mode(None):
        closed = jax.make_jaxpr(lambda *a: fn(*a, **kwargs))(*args)
    answers = []
    for eqn, kernel in zip(ir.pallas_call_eqns(closed), tpu.kernels(fn, *args, **kwargs), strict=True):
        mapping = eqn.params["grid_mapping"]
        body = eqn.params["jaxpr"]
        scratch = body.invars[len(body.invars) - mapping.num_scratch_operands:] if mapping.num_scratch_operands else []
        answers.append({
            "name": kernel.kernel_attributes["sym_name"].strip('"'),
            "grid": tuple(int(g) for g in mapping.grid),
            "dimension_semantics": tuple(eqn.params["compiler_params"].dimension_semantics),
            "windows": tuple(
                None if str(block.block_aval.memory_space) == "any"
                else tuple(getattr(d, "block_size", 1) for d in block.block_shape)  # squeezed: 1
                for block in mapping.block_mappings),
            "scalar_prefetch": mapping.num_index_operands,
            "scratch": tuple((tuple(v.aval.inner_aval.shape), MLIR_TYPES[str(v.aval.inner_aval.dtype)],
                              str(v.aval.memory_space)) for v in scratch),
            "op_counts": kernel.op_counts,
            "_text": kernel.text,
        })
    return answers


def check(impl, fn, args, what, kwargs=None):
    for want in expected(fn, args, kwargs):
        got = impl.mosaic_reader.read_kernel(want["_text"])
        display = impl.mosaic_reader.read_kernel.display
        assert isinstance(got, dict), f"{display} should return a dict, got {type(got).__name__}"
        for key in KEYS:
            value = got.get(key)
            if key == "op_counts" and isinstance(value, dict):
                value = {op: n for op, n in value.items() if n}
            assert value == want[key], (
                f"{display} reads {key!r} of {what} ({want['name']}) as {value!r}; the kernel has "
                f"{want[key]!r}")


@pytest.fixture(scope="module")
def course_kernels(request):
    """Chapter 11's matmul and chapter 13's forward as those chapters first write them (the course's
    specimens, which stay as they are while the solutions are tuned), and chapter 6's gather."""
    return {"ch11.matmul.matmul": public_kernels.tiled_matmul, "ch13.forward.flash_forward": public_kernels.plain_flash_forward,
            "ch06.index_maps.gather_rows": public_kernels.course_solution(request.path, "ch06.index_maps.gather_rows")}


def test_reads_the_ch11_matmul(impl, course_kernels):
    x = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    check(impl, course_kernels["ch11.matmul.matmul"], (x, x), "ch11's matmul, 512², default blocks")


def test_reads_the_ch13_flash_forward(impl, course_kernels):
    """4-D windows with squeezed (None) dimensions, three scratch buffers, nested scf.if."""
    q = jax.ShapeDtypeStruct((1, 2, 512, 128), jnp.bfloat16)
    check(impl, course_kernels["ch13.forward.flash_forward"], (q, q, q), "ch13's causal flash forward",
          dict(causal=True))


def test_reads_the_ch06_gather(impl, course_kernels):
    """Scalar prefetch: the indices come first in the signature (SMEM), and the table's window is a
    squeezed (None, 1, D) block read at a data-dependent row."""
    table, idx = jax.ShapeDtypeStruct((1000, 256), jnp.bfloat16), jax.ShapeDtypeStruct((64,), jnp.int32)
    check(impl, course_kernels["ch06.index_maps.gather_rows"], (table, idx), "ch06's gather_rows, scalar prefetch")


def test_reads_jax_paged_attention(impl):
    """JAX's own paged attention: 4 scalar-prefetch refs, two operands left in HBM (pl.ANY: no
    window), DMA-semaphore scratch, ops in MLIR's generic (quoted) form."""
    q = jax.ShapeDtypeStruct((2, 8, 128), jnp.bfloat16)
    pages = jax.ShapeDtypeStruct((2, 64, 16, 128), jnp.bfloat16)
    lengths, indices = jax.ShapeDtypeStruct((2,), jnp.int32), jax.ShapeDtypeStruct((2, 16), jnp.int32)
    check(impl, lambda *a: paged_attention(*a, pages_per_compute_block=4),
          (q, pages, pages, lengths, indices), "jax.experimental.pallas.ops.tpu.paged_attention")


SCRATCH = {
    "vmem f32": pltpu.VMEM((16, 128), jnp.float32),
    "vmem bf16 3-D": pltpu.VMEM((2, 16, 256), jnp.bfloat16),
    "smem i32": pltpu.SMEM((3,), jnp.int32),
    "dma semaphores": pltpu.SemaphoreType.DMA((2,)),
    "one semaphore": pltpu.SemaphoreType.REGULAR,
}


@st.composite
def kernel_plans(draw):
    """A small copy kernel with a drawn grid, dimension semantics, block, scalar-prefetch count and
    scratch list: the variety a reader that fits three kernels would miss."""
    rank = draw(st.integers(1, 3))
    return dict(
        grid=tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))),
        semantics=tuple(draw(st.lists(st.sampled_from(("parallel", "arbitrary")), min_size=rank,
                                      max_size=rank))),
        block=draw(st.sampled_from(((None, 16, 256), (2, 8, 128), (1, 64, 128)))),
        prefetch=draw(st.integers(0, 2)),
        scratch=tuple(draw(st.lists(st.sampled_from(sorted(SCRATCH)), max_size=3))),
    )


def planned_kernel(plan):
    prefetch = plan["prefetch"]

    def kernel(*refs):
        refs[prefetch + 1][...] = jnp.exp(refs[prefetch][...])

    def call(*args):  # pallas_call is built inside the call: interpret mode is read when it is built
        spec = pl.BlockSpec(plan["block"], lambda *indices: (0, 0, 0))
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((2, 64, 256), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=prefetch, grid=plan["grid"], in_specs=[spec], out_specs=spec,
                scratch_shapes=[SCRATCH[name] for name in plan["scratch"]]),
            compiler_params=pltpu.CompilerParams(dimension_semantics=plan["semantics"]))(*args)

    args = (jax.ShapeDtypeStruct((4,), jnp.int32),) * prefetch + (jax.ShapeDtypeStruct((2, 64, 256), jnp.float32),)
    return call, args


@given(plan=kernel_plans())
def test_reads_drawn_kernels(impl, plan):
    call, args = planned_kernel(plan)
    check(impl, call, args, f"a copy kernel planned as {plan}")


def _reads_as(got, wants):
    """None when each read_kernel answer has the keys the pallas_call and MLIR say."""
    if not (isinstance(got, (list, tuple)) and len(got) == len(wants)):
        return f"answered {got!r:.120}"
    for answer, want in zip(got, wants):
        if not isinstance(answer, dict):
            return f"read_kernel returned a {type(answer).__name__}, not a dict"
        for key, expected_value in want.items():
            value = answer.get(key)
            if key == "op_counts" and isinstance(value, dict):
                value = {op: n for op, n in value.items() if n}
            if _as_tuples(value) != _as_tuples(expected_value):
                return f"read_kernel reads {key!r} of {want['name']} as {value!r:.200}; the kernel has {expected_value!r:.200}"
    return None


def _as_tuples(value):
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_tuples(v) for k, v in value.items()}
    return value


def _read_each(graded, texts):
    return [graded(text) for text in texts]


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): copy kernels the grader plans, their
    Mosaic modules lowered and read in the grader's process."""
    cases = []
    for _ in range(2):
        rank = int(rng.integers(1, 4))
        plan = dict(grid=tuple(int(g) for g in rng.integers(1, 4, size=rank)),
                    semantics=tuple(str(s) for s in rng.choice(("parallel", "arbitrary"), size=rank)),
                    block=((None, 16, 256), (2, 8, 128), (1, 64, 128))[int(rng.integers(3))],
                    prefetch=int(rng.integers(0, 3)),
                    scratch=tuple(str(s) for s in rng.choice(sorted(SCRATCH), size=int(rng.integers(0, 4)))))
        wants = expected(*planned_kernel(plan))
        texts = [want.pop("_text") for want in wants]
        cases.append(checks.trusted.exact("read_kernel", (texts,), through=_read_each, expected=wants,
                                          compare=_reads_as, label=f"read_kernel of a copy kernel planned as {plan}"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
