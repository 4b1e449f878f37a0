"""Gate 01, Pallas fundamentals. Run: pytest --gates --chip=v5e

- correct: the chapter's differential checks at gate-sized problems. Under interpret
  mode (any CPU) this writes an off-chip-verified row; natively on a TPU, a measured one.
- matmul-near-xla: your matmul at 4096³ bf16 within striking distance of XLA's (the two
  timed in the same interleaved rounds);
- fused-beats-unfused: gelu(x @ w + b) in one kernel faster than XLA's unfused sequence:
  the matmul, the bias add and the GELU as three separately compiled calls, each a round
  trip through HBM. One jax.jit of the three would let XLA fuse the bias and the GELU
  into the matmul's output, which is not the sequence the criterion names.
Before anything is timed, your kernels' outputs at 4096 are checked against the floor's
(and again after timing, on fresh inputs). On a CPU the two speed criteria write their
roofline floors for the chip and are skipped as awaiting hardware: nothing is timed off-chip.
"""

import functools

import jax
import pytest

from pytest_tpucourse import checks, references, roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

GATE = gating.gate(1)
BLOCKS = dict(bm=512, bk=512, bn=512)


def _inputs(slot):
    """inputs(seed): fresh bf16 operands of a slot (built only on the chip)."""
    def inputs(seed):
        return tuple(tst.random_array(s, slot.dtype, seed=10 * seed + j) for j, s in enumerate(slot.shapes))
    return inputs


_matmul = jax.jit(references.matmul_floor)
_add_bias = jax.jit(lambda h, b: (h.astype("float32") + b.astype("float32")).astype(h.dtype))
_gelu = jax.jit(lambda z: references.ACTIVATIONS["gelu"](z.astype("float32")).astype(z.dtype))


def xla_unfused(x, w, b):
    """XLA's unfused sequence: three compiled programs, each output written to HBM and read back."""
    return _gelu(_add_bias(_matmul(x, w), b))


@pytest.mark.gate(1)
def test_kernels_are_correct(gate_run, impl):
    [slot] = GATE.criterion("correct").slots
    x, w, b = (tst.random_array(shape, slot.dtype, seed) for seed, shape in enumerate(slot.shapes))

    def check():
        checks.assert_matches_reference(impl.matmul.matmul, (x, w), kwargs=BLOCKS,
                                        reference=references.MATMUL)
        checks.assert_matches_reference(impl.fused_matmul.matmul_bias_act, (x, w, b),
                                        kwargs=dict(activation="gelu", **BLOCKS),
                                        reference=references.MATMUL_BIAS_ACT.bind(activation="gelu"))

    gate_run.verify("correct", slot.op, slot.shapes, slot.dtype, check)


@pytest.mark.gate(1)
def test_matmul_within_striking_distance_of_xla(gate_run, impl):
    [slot] = GATE.criterion("matmul-near-xla").slots
    (m, k), (_, n) = slot.shapes
    gate_run.measure_trio(
        "matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.matmul_cost(m, k, n, slot.dtype),
        floor=_matmul,
        kernel=jax.jit(functools.partial(impl.matmul.matmul.resolve(), **BLOCKS)),
        ceiling=None, inputs=_inputs(slot))


@pytest.mark.gate(1)
def test_fused_kernel_beats_xla_unfused_sequence(gate_run, impl):
    [slot] = GATE.criterion("fused-beats-unfused").slots
    (m, k), (_, n), _ = slot.shapes
    gate_run.measure_trio(
        "fused-beats-unfused", slot.op, slot.shapes, slot.dtype, roofline.matmul_cost(m, k, n, slot.dtype),
        floor=xla_unfused,
        kernel=jax.jit(functools.partial(impl.fused_matmul.matmul_bias_act.resolve(),
                                         activation="gelu", **BLOCKS)),
        ceiling=None, inputs=_inputs(slot))
