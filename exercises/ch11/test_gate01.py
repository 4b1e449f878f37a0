"""Gate 01, Pallas fundamentals. Run: pytest --gates --chip=v5e

- correct: the chapter's differential checks at gate-sized problems. Under interpret
  mode (any CPU) this writes an off-chip-verified row; natively on a TPU, a measured one.
- matmul-near-xla: your matmul at 4096³ bf16 within striking distance of XLA's, with
  JAX's own Pallas matmul timed beside it as the ceiling;
- fused-beats-unfused: act(x @ w + b) in one kernel faster than XLA's sequence.
On a CPU the two speed criteria write their roofline floors for the chip and are
skipped as awaiting hardware: nothing is timed off-chip.
"""

import functools

import jax
import pytest

from pytest_tpucourse import checks, public_kernels, references, roofline
from pytest_tpucourse import strategies as tst

N = 4096
BLOCKS = dict(bm=512, bk=512, bn=512)


def _input_sets(gate_run, shapes, sets=3):
    """Fresh bf16 operands per set (only on the chip: nothing is timed off it)."""
    if not gate_run.on_accelerator:
        return []
    return [tuple(tst.random_array(s, "bfloat16", seed=10 * i + j) for j, s in enumerate(shapes))
            for i in range(sets)]


@pytest.mark.gate(1)
def test_kernels_are_correct(gate_run, impl):
    x = tst.random_array((512, 1024), "bfloat16", 0)
    w = tst.random_array((1024, 512), "bfloat16", 1)
    b = tst.random_array((512,), "bfloat16", 2)

    def check():
        checks.assert_matches_reference(impl.matmul.matmul, (x, w), kwargs=BLOCKS,
                                        reference=references.MATMUL)
        checks.assert_matches_reference(impl.fused_matmul.matmul_bias_act, (x, w, b),
                                        kwargs=dict(activation="gelu", **BLOCKS),
                                        reference=references.MATMUL_BIAS_ACT.bind(activation="gelu"))

    gate_run.verify("correct", "matmul+fused", [x.shape, w.shape, b.shape], "bfloat16", check)


@pytest.mark.gate(1)
def test_matmul_within_striking_distance_of_xla(gate_run, impl):
    shapes = [(N, N), (N, N)]
    gate_run.measure_trio(
        "matmul-near-xla", "matmul", shapes, "bfloat16", roofline.matmul_cost(N, N, N, "bfloat16"),
        floor=jax.jit(references.matmul_floor),
        kernel=jax.jit(functools.partial(impl.matmul.matmul.resolve(), **BLOCKS)),
        ceiling=jax.jit(functools.partial(public_kernels.matmul, **BLOCKS)),
        input_sets=_input_sets(gate_run, shapes))


@pytest.mark.gate(1)
def test_fused_kernel_beats_xla_unfused_sequence(gate_run, impl):
    shapes = [(N, N), (N, N), (N,)]
    cost = roofline.matmul_cost(N, N, N, "bfloat16")
    gate_run.measure_trio(
        "fused-beats-unfused", "matmul_bias_gelu", shapes, "bfloat16", cost,
        floor=jax.jit(functools.partial(references.MATMUL_BIAS_ACT.floor, activation="gelu")),
        kernel=jax.jit(functools.partial(impl.fused_matmul.matmul_bias_act.resolve(),
                                         activation="gelu", **BLOCKS)),
        ceiling=None, input_sets=_input_sets(gate_run, shapes))
