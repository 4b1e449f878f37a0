"""Gate 01, Pallas fundamentals. Run: pytest --gates --chip=v5e

- correct: the chapter's differential checks at gate-sized problems. Under interpret
  mode (any CPU) this writes an off-chip-verified row; natively on a TPU, a measured one.
- matmul-near-xla: your matmul at 4096³ bf16, at its default blocks, within striking distance of
  XLA's (the two timed in the same interleaved rounds): the defaults are your choice for the chip;
- fused-beats-unfused: gelu(x @ w + b) in one kernel, at its default blocks, faster than XLA's
  unfused sequence:
  the matmul, the bias add and the GELU as three separately compiled calls, each a round
  trip through HBM. One jax.jit of the three would let XLA fuse the bias and the GELU
  into the matmul's output, which is not the sequence the criterion names: that fused
  program is timed in the same rounds and shown on the floor's row, never judged.
XLA's matmul is timed twice in the same rounds, its weights fixed (one array throughout, as a
model's step sees them) and every input rotating; each criterion is judged against the faster.
Before anything is timed, your kernels' outputs at 4096 are checked against the floor's
(and again after timing, on fresh inputs). On a CPU the two speed criteria write their
roofline floors for the chip and are skipped as awaiting hardware: nothing is timed off-chip.
Each gate judges your own kernels (pytest_tpucourse/gates/own_work.py): Pallas kernels written
in your tree doing the matmul, not XLA's matmul beside a token kernel, nor a kernel of JAX's.
`pytest --gates --rehearse` runs the measuring path on a stand-in clock, at 512 on a CPU.
"""

import functools

import jax
import pytest

from pytest_tpucourse import checks, references, roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

GATE = gating.gate(1)
BLOCKS = dict(bm=512, bk=512, bn=512)
CPU_DIM = 512  # a rehearsal on a CPU: every dimension at most one block


def _inputs(gate_run, slot):
    """inputs(seed): fresh bf16 operands of a slot (built only on the chip, or in a rehearsal)."""
    shapes = gate_run.shapes(slot.shapes, cpu=[[min(d, CPU_DIM) for d in s] for s in slot.shapes])

    def inputs(seed):
        return tuple(tst.timed_input(s, slot.dtype, 10 * seed + j) for j, s in enumerate(shapes))
    return inputs


def _add_bias_raw(h, b):
    return (h.astype("float32") + b.astype("float32")).astype(h.dtype)


def _gelu_raw(z):
    return references.ACTIVATIONS["gelu"](z.astype("float32")).astype(z.dtype)


_matmul = jax.jit(references.matmul_floor)
_add_bias = jax.jit(_add_bias_raw)
_gelu = jax.jit(_gelu_raw)


def xla_unfused(x, w, b):
    """XLA's unfused sequence: three compiled programs, each output written to HBM and read back."""
    return _gelu(_add_bias(_matmul(x, w), b))


# The same three under one jit: XLA fuses the bias and the GELU into the matmul's output.
xla_fused = jax.jit(lambda x, w, b: _gelu_raw(_add_bias_raw(references.matmul_floor(x, w), b)))


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

    (m, k), (_, n), _ = slot.shapes
    flops = roofline.matmul_cost(m, k, n, slot.dtype).flops
    work = [gating.own_kernel(impl.matmul.matmul, (x, w), BLOCKS, flops=flops),
            gating.own_kernel(impl.fused_matmul.matmul_bias_act, (x, w, b), dict(activation="gelu", **BLOCKS),
                             flops=flops)]
    gate_run.verify("correct", slot.op, slot.shapes, slot.dtype, check, work=work)


@pytest.mark.gate(1)
def test_matmul_within_striking_distance_of_xla(gate_run, impl):
    [slot] = GATE.criterion("matmul-near-xla").slots
    (m, k), (_, n) = slot.shapes
    gate_run.measure_trio(
        "matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.matmul_cost(m, k, n, slot.dtype),
        floor=_matmul,
        kernel=jax.jit(impl.matmul.matmul.resolve()),  # at your default blocks: chosen for the chip
        ceiling=None, inputs=_inputs(gate_run, slot), weights=(1,))


@pytest.mark.gate(1)
def test_fused_kernel_beats_xla_unfused_sequence(gate_run, impl):
    [slot] = GATE.criterion("fused-beats-unfused").slots
    (m, k), (_, n), _ = slot.shapes
    gate_run.measure_trio(
        "fused-beats-unfused", slot.op, slot.shapes, slot.dtype, roofline.matmul_cost(m, k, n, slot.dtype),
        floor=xla_unfused,
        kernel=jax.jit(functools.partial(impl.fused_matmul.matmul_bias_act.resolve(), activation="gelu")),
        ceiling=None, inputs=_inputs(gate_run, slot), weights=(1, 2), also={"xla-fused": xla_fused})
