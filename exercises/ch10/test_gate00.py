"""Gate 00, The machine: the roofline predicts this chip. Run: pytest --gates --chip=v5e

XLA's own matmul, skinny matmul and add (the criterion's three slots, in
pytest_tpucourse/gates/criteria.py), timed on the detected chip, must land within
gating.GATE0_BAND of their roofline floors: the whole 95% interval of the ratio, not
just its median. On a CPU each writes its prediction and is skipped as awaiting hardware.
"""

import pytest

from pytest_tpucourse import roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

CRITERION = gating.gate(0).criterion("roofline-predicts")


def _slot_id(slot) -> str:
    return f"{slot.op}-{'x'.join(str(d) for d in slot.shapes[0])}"


@pytest.mark.gate(0)
@pytest.mark.parametrize("slot", CRITERION.slots, ids=_slot_id)
def test_xla_floor_is_predicted(gate_run, slot):
    import jax
    import jax.numpy as jnp

    def inputs(seed):  # built only on a chip: nothing is timed off it
        return tuple(tst.random_array(shape, slot.dtype, 10 * seed + i) for i, shape in enumerate(slot.shapes))

    cost = roofline.operand_cost(slot.op, slot.shapes, slot.dtype)
    fn = jax.jit(jnp.matmul if slot.op == "matmul" else jnp.add)
    gate_run.measure_floor(CRITERION.id, slot.op, slot.shapes, slot.dtype, cost, fn, inputs)
