"""Gate 00, The machine: the roofline predicts this chip. Run: pytest --gates --chip=v5e

XLA's own matmul, skinny matmul and add (the criterion's three slots, in
pytest_tpucourse/gates/criteria.py), timed on the detected chip, must land within
gating.GATE0_BAND of their roofline floors: the whole 95% interval of the ratio, not
just its median. On a CPU each writes its prediction and is skipped as awaiting hardware;
`pytest --gates --rehearse` runs the measuring path on a stand-in clock, at dimensions of at
most CPU_DIM on a CPU.
"""

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

CRITERION = gating.gate(0).criterion("roofline-predicts")
CPU_DIM = 512  # a rehearsal on a CPU builds every dimension at most this long


def _slot_id(slot) -> str:
    return f"{slot.op}-{'x'.join(str(d) for d in slot.shapes[0])}"


@pytest.mark.gate(0)
@pytest.mark.parametrize("slot", CRITERION.slots, ids=_slot_id)
def test_xla_floor_is_predicted(gate_run, slot):
    import jax
    import jax.numpy as jnp

    shapes = gate_run.shapes(slot.shapes, cpu=[[min(d, CPU_DIM) for d in s] for s in slot.shapes])

    def inputs(seed):  # built only on a chip (or in a rehearsal): nothing is timed off it
        return tuple(tst.timed_input(shape, slot.dtype, 10 * seed + i) for i, shape in enumerate(shapes))

    cost = roofline.operand_cost(slot.op, slot.shapes, slot.dtype)
    fn = jax.jit(jnp.matmul if slot.op == "matmul" else jnp.add)
    gate_run.measure_floor(CRITERION.id, slot.op, slot.shapes, slot.dtype, cost, fn, inputs)
