"""Gate 03, the priesthood kernels. Run: pytest --gates --chip=v5e exercises/ch13

- correct: the chapter's differential checks (values, lse, dq, dk, dv) at a gate-sized
  problem with the default blocks (clamped to its length), causal and not. Under interpret mode (any CPU)
  this writes an off-chip-verified row; natively on a TPU, a measured one.
- beats-xla: flash attention at target shapes at least 1.25x faster than XLA's attention
  (which materialises the score matrix);
- near-ceiling: within 1.15x of the tuned ceiling: JAX's shipped Pallas flash attention at
  the fastest configuration of its space on the chip (pytest_tpucourse/gates/ceilings.py:
  block_q, block_kv up to the sequence, its key sub-block), searched at each target shape
  from its defaults and this chapter's solution's blocks until the choice is interior or
  at the chip's VMEM or the sequence (the ceiling row's notes name the choice, each
  configuration's time and where the choice sits).
Both speed criteria are timed for the forward and for forward + backward (a training
step's attention), causal and not, at the criteria's slots (pytest_tpucourse/gates/criteria.py).
Before timing, your kernel's and each ceiling's outputs are checked against XLA's at the
timed shape. On a CPU they write the roofline floor of each problem for the chip and are
skipped as awaiting hardware: nothing is timed off-chip. The gate judges your own kernels
(pytest_tpucourse/gates/own_work.py): flash attention written in your tree, not JAX's.
`pytest --gates --rehearse` runs the measuring path on a stand-in clock, at CPU_SHAPE on a CPU.
"""

import functools

import jax
import pytest

from pytest_tpucourse import checks, references, roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

GATE = gating.gate(3)
CPU_SHAPE = (1, 1, 128, 128)  # (batch, heads, seq, head_dim) a rehearsal on a CPU times at
CRITERIA = ("beats-xla", "near-ceiling")


def _inputs(shape, dtype):
    """inputs(seed): fresh (q, k, v, dO), built only on the chip (or in a rehearsal)."""
    def inputs(seed):
        return tuple(tst.timed_input(shape, dtype, 10 * seed + j) for j in range(4))
    return inputs


def _forward(attention):
    return jax.jit(lambda q, k, v, do: attention(q, k, v))


def _forward_backward(attention):
    """out and (dq, dk, dv) for the cotangent dO: the attention of one training step."""
    def step(q, k, v, do):
        out, pullback = jax.vjp(attention, q, k, v)
        return out, pullback(do)
    return jax.jit(step)


@pytest.mark.gate(3)
@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
def test_flash_attention_is_correct(gate_run, impl, causal):
    slot = GATE.criterion("correct").slots[int(causal)]
    batch, heads, seq, head_dim = slot.shapes[0]
    cfg = tst.AttentionConfig(batch=batch, heads=heads, kv_heads=heads, q_len=seq, kv_len=seq,
                              head_dim=head_dim, causal=causal, dtype=slot.dtype)
    q, k, v = cfg.arrays(0)

    def check():
        checks.assert_matches_reference(
            impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=causal),
            reference=references.ATTENTION_WITH_LSE.bind(causal=causal), names=("out", "lse"))
        checks.assert_grads_match(
            impl.backward.flash_attention, (q, k, v), kwargs=dict(causal=causal),
            reference=references.ATTENTION.bind(causal=causal), argnames=("dq", "dk", "dv"),
            check_custom_vjp=False)

    cost = roofline.attention_cost(batch, heads, seq, seq, head_dim, slot.dtype, causal=causal)
    backward = roofline.attention_cost(batch, heads, seq, seq, head_dim, slot.dtype, causal=causal, backward=True)
    work = [gating.own_kernel(impl.forward.flash_forward, (q, k, v), dict(causal=causal), flops=cost.flops),
            gating.own_kernel_gradient(impl.backward.flash_attention, (q, k, v), dict(causal=causal),
                                 flops=backward.flops)]
    gate_run.verify("correct", slot.op, slot.shapes, slot.dtype, check, work=work)


SPEED_SLOTS = [(slot, causal, backward) for slot in GATE.criterion("beats-xla").slots
               for causal in (False, True) for backward in (False, True)
               if slot.op == gating.attention_op(causal, backward)]


@pytest.mark.gate(3)
@pytest.mark.parametrize("slot, causal, backward", SPEED_SLOTS,
                         ids=[f"{s.op}-{'x'.join(map(str, s.shapes[0][:3]))}" for s, _, _ in SPEED_SLOTS])
def test_flash_attention_speed(gate_run, impl, slot, causal, backward):
    batch, heads, seq, head_dim = slot.shapes[0]
    cost = roofline.attention_cost(batch, heads, seq, seq, head_dim, slot.dtype, causal=causal,
                                   backward=backward)
    wrap = _forward_backward if backward else _forward
    kernel = functools.partial(impl.backward.flash_attention.resolve(), causal=causal)
    floor = functools.partial(references.attention_floor, causal=causal)
    shape = gate_run.shapes(slot.shapes[0], cpu=CPU_SHAPE)
    ceiling = gating.flash_ceiling(wrap, q_len=shape[2], kv_len=shape[2], backward=backward, causal=causal)
    # JAX's forward compiles to one custom call (flash_attention.1 on a v5e): timed as exactly that
    gate_run.measure_trio(CRITERIA, slot.op, slot.shapes, slot.dtype, cost, floor=wrap(floor),
                          kernel=wrap(kernel), ceiling=ceiling, inputs=_inputs(shape, slot.dtype),
                          one_custom_call=() if backward else ("ceiling",))
