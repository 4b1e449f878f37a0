"""Gate 05, the capstone. Run: pytest --gates --chip=v5e exercises/ch15

Everything is read from the manifest (manifest() / capstone.toml):

- correct: the differential suite, every enumerated case (values; grads where the case
  says grads = true) against the manifest's float64 oracle. Under interpret mode (any
  CPU) this writes an off-chip-verified row; natively on a TPU, a measured one.
- beats-xla and near-ceiling: at each target shape, the manifest's floor (XLA), your
  window_attention (blocks from the autotuning cache for the chip, else the defaults)
  and the manifest's ceiling with its tuned configuration, timed in one run, for the
  forward and for forward + backward. The slots are your manifest's first two targets
  (gates/criteria.py `declared`). A ceiling that is the course's splash attention is
  searched over its space on the chip (gates/ceilings.py: block_q, block_kv,
  block_kv_compute, the fused backward), starting from the manifest's configuration. On a CPU they write the roofline floor of each
  problem for the chip and are skipped as awaiting hardware: nothing is timed off-chip.
  `pytest --gates --rehearse` runs this path on a stand-in clock, at CPU_SEQ on a CPU.
- both judge your own kernel (pytest_tpucourse/gates/own_work.py): Pallas kernels written in
  your tree doing the attention, not XLA's attention nor JAX's splash kernel.
- upstream (the submission exists in public) is a link, not a measurement (`tpucourse records link URL`): no test
  judges it (docs/gates.md).
"""

import functools

import jax
import pytest

from pytest_tpucourse.instruments import capstone
from pytest_tpucourse import checks, public_kernels, roofline
from pytest_tpucourse import strategies as tst
from pytest_tpucourse import gating

CRITERIA = ("beats-xla", "near-ceiling")
CPU_SEQ = 128  # a rehearsal on a CPU times one head of this many queries


def _out_only(fn):
    """The floor and the oracle return (out, lse); a timed step needs out alone."""
    return lambda *a, **k: fn(*a, **k)[0]


def _timed_step(attention, backward: bool):
    """One jitted step on an input set (q, k, v, dO): the forward alone, or forward and backward
    (the gradients for the cotangent dO, as in a training step)."""
    if backward:
        return jax.jit(lambda q, k, v, do: jax.vjp(attention, q, k, v)[1](do))
    return jax.jit(lambda q, k, v, do: attention(q, k, v))


@pytest.mark.gate(5)
def test_capstone_is_correct(gate_run, impl):
    manifest = impl.manifest.manifest()
    cases = capstone.cases(manifest)
    reference = capstone.reference

    def check():
        for case in cases:
            q, k, v = case.arrays(0)
            blocks = impl.forward.BlockSizes.resolve()(case.block_q, case.block_kv)
            checks.assert_matches_reference(
                impl.forward.window_forward, (q, k, v), kwargs=dict(blocks=blocks, **case.kwargs),
                reference=reference(manifest, **case.kwargs), names=("out", "lse"), note=f"capstone case ({case})")
            if case.grads:
                checks.assert_grads_match(
                    impl.backward.window_attention, (q, k, v),
                    kwargs=dict(blocks=blocks, **case.kwargs),
                    reference=capstone.output_only(reference(manifest, **case.kwargs)),
                    argnames=("dq", "dk", "dv"), check_custom_vjp=False, note=f"capstone case ({case})")

    shapes = [list(s) for c in cases for s in c.shapes()]
    gate_run.verify("correct", "capstone", shapes, "/".join(sorted({c.dtype for c in cases})), check,
                    notes=f"{len(cases)} enumerated cases of the manifest", work=_own_work(impl, cases[0]))


def _own_work(impl, case):
    """The first case's forward and gradient programs, which must be your kernels doing the attention."""
    q, k, v = case.arrays(0)
    blocks = impl.forward.BlockSizes.resolve()(case.block_q, case.block_kv)
    window = dict(case.kwargs).get("window")
    cost = roofline.attention_cost(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], case.dtype,
                                   window=window)
    backward = roofline.attention_cost(q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], case.dtype,
                                       backward=True, window=window)
    kwargs = dict(blocks=blocks, **case.kwargs)
    return [gating.own_kernel(impl.forward.window_forward, (q, k, v), kwargs, flops=cost.flops),
            gating.own_kernel_gradient(impl.backward.window_attention, (q, k, v), kwargs, flops=backward.flops)]


def ceiling(gate_run, manifest, t, shape, backward: bool):
    """The ceiling as gate 05 times it: the course's splash attention searched over its space, from
    the manifest's configuration; any other public kernel at the manifest's configuration."""
    config, options = dict(manifest["baselines"]["ceiling_config"]), dict(t["options"])
    fn = capstone.resolve(manifest["baselines"]["ceiling"])
    if fn is not public_kernels.splash_attention:
        return _timed_step(functools.partial(fn, **config, **options), backward)
    start = [] if "block" not in config else [dict(block_q=config["block"], block_kv=config["block"], sub=1)]
    return gating.splash_ceiling(lambda attention: _timed_step(attention, backward), q_len=shape[2],
                                 kv_len=shape[2], backward=backward, start=start, **options)


@pytest.mark.gate(5)
@pytest.mark.parametrize("target", range(gating.CAPSTONE_TIMED_TARGETS),
                         ids=[f"target{n}" for n in range(gating.CAPSTONE_TIMED_TARGETS)])
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
def test_capstone_speed(gate_run, impl, backward, target):
    manifest = impl.manifest.manifest()
    targets = manifest["targets"]
    if target >= len(targets):
        pytest.skip(f"the manifest lists {len(targets)} target shape(s)")
    t = targets[target]
    options = dict(t["options"])
    shape = (t["batch"], t["heads"], t["seq"], t["head_dim"])
    cost = roofline.attention_cost(t["batch"], t["heads"], t["seq"], t["seq"], t["head_dim"],
                                   t["dtype"], backward=backward, window=options.get("window"))
    floor = functools.partial(_out_only(capstone.resolve(manifest["baselines"]["floor"])), **options)
    kernel = functools.partial(impl.backward.window_attention.resolve(), **options)
    built = gate_run.shapes(shape, cpu=(1, 1, CPU_SEQ, t["head_dim"]))

    def inputs(seed):  # (q, k, v, dO), built only on the chip (or in a rehearsal)
        return tuple(tst.timed_input(built, t["dtype"], 10 * seed + j) for j in range(4))

    op = gating.capstone_op(backward, options)  # the slot chapter 15's manifest declares (gates/criteria.py)
    gate_run.measure_trio(CRITERIA, op, [shape, shape, shape], t["dtype"], cost,
                          floor=_timed_step(floor, backward), kernel=_timed_step(kernel, backward),
                          ceiling=ceiling(gate_run, manifest, t, built, backward), inputs=inputs)
