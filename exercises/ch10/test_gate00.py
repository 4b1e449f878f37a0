"""Gate 00, The machine: the roofline predicts this chip.

XLA's own matmul, skinny matmul and add, measured on the detected chip, must land
within gates.GATE0_BAND of their roofline floors. On a CPU each writes its
prediction and is skipped as awaiting hardware. Run: pytest --gates --chip=v5e
"""

import pytest

from pytest_tpucourse import roofline

CASES = (
    ("matmul", ((4096, 4096), (4096, 4096))),
    ("matmul", ((8, 4096), (4096, 4096))),
    ("add", ((4096, 4096), (4096, 4096))),
)


def _inputs(shapes, sets=3):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), sets * len(shapes))
    it = iter(keys)
    return [tuple(jax.random.normal(next(it), s, jnp.bfloat16) for s in shapes) for _ in range(sets)]


@pytest.mark.gate(0)
@pytest.mark.parametrize("op, shapes", CASES, ids=["matmul-4096", "matmul-skinny-8", "add-4096"])
def test_xla_floor_is_predicted(gate_run, op, shapes):
    import jax
    import jax.numpy as jnp

    cost = roofline.operand_cost(op, shapes, "bfloat16")
    fn = jax.jit(jnp.matmul if op == "matmul" else jnp.add)
    input_sets = _inputs(shapes) if gate_run.on_accelerator else []
    gate_run.measure_floor("roofline-predicts", op, shapes, "bfloat16", cost, fn, input_sets)
