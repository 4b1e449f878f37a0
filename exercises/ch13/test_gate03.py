"""Gate 03, the priesthood kernels. Run: pytest --gates --chip=v5e exercises/ch13

- correct: the chapter's differential checks (values, lse, dq, dk, dv) at a gate-sized
  problem with the default 128-blocks, causal and not. Under interpret mode (any CPU)
  this writes an off-chip-verified row; natively on a TPU, a measured one.
- beats-xla: flash attention at target shapes at least 1.25x faster than XLA's attention
  (which materialises the score matrix);
- near-ceiling: within 1.15x of JAX's shipped Pallas flash attention.
Both speed criteria are timed for the forward and for forward + backward (a training
step's attention), causal and not. On a CPU they write the roofline floor of each
problem for the chip and are skipped as awaiting hardware: nothing is timed off-chip.
"""

import functools

import jax
import pytest

from pytest_tpucourse import checks, public_kernels, references, roofline
from pytest_tpucourse import strategies as tst

DTYPE = "bfloat16"
HEAD_DIM = 128
# (batch, heads, sequence): XLA's f32 score matrix is 2 GiB for the first and 2 GiB for
# the second, which a v5e (16 GiB HBM) still holds, so the floor can be timed.
TARGETS = [(2, 16, 4096), (1, 8, 8192)]
CRITERIA = ("beats-xla", "near-ceiling")


def _input_sets(gate_run, shape, sets=3):
    """Fresh bf16 (q, k, v, dO) per set (only on the chip: nothing is timed off it)."""
    if not gate_run.on_accelerator:
        return []
    return [tuple(tst.random_array(shape, DTYPE, seed=10 * i + j) for j in range(4))
            for i in range(sets)]


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
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512,
                              head_dim=HEAD_DIM, causal=causal, dtype=DTYPE)
    q, k, v = cfg.arrays(0)

    def check():
        checks.assert_matches_reference(
            impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=causal),
            reference=references.ATTENTION_WITH_LSE.bind(causal=causal), names=("out", "lse"))
        checks.assert_grads_match(
            impl.backward.flash_attention, (q, k, v), kwargs=dict(causal=causal),
            reference=references.ATTENTION.bind(causal=causal), argnames=("dq", "dk", "dv"),
            check_custom_vjp=False)

    gate_run.verify("correct", f"flash_attention{'-causal' if causal else ''}",
                    [q.shape, k.shape, v.shape], DTYPE, check)


@pytest.mark.gate(3)
@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
@pytest.mark.parametrize("batch, heads, seq", TARGETS, ids=lambda x: str(x))
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
def test_flash_attention_speed(gate_run, impl, backward, batch, heads, seq, causal):
    shape = (batch, heads, seq, HEAD_DIM)
    cost = roofline.attention_cost(batch, heads, seq, seq, HEAD_DIM, DTYPE, causal=causal,
                                   backward=backward)
    wrap = _forward_backward if backward else _forward
    kernel = functools.partial(impl.backward.flash_attention.resolve(), causal=causal)
    floor = functools.partial(references.attention_floor, causal=causal)
    ceiling = functools.partial(public_kernels.flash_attention, causal=causal)
    op = f"attention{'-causal' if causal else ''}-{'fwd-bwd' if backward else 'fwd'}"
    gate_run.measure_trio(
        CRITERIA, op, [shape, shape, shape], DTYPE, cost,
        floor=wrap(floor), kernel=wrap(kernel), ceiling=wrap(ceiling),
        input_sets=_input_sets(gate_run, shape))

