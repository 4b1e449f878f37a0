"""The ceilings' spaces (gates/ceilings.py) and the programs they time: every knob the public kernels take
is free (the backward kernels' blocks too), the course solution's blocks are among the first tried, the
compiler (not an estimate) bounds the blocks, and splash runs as model code runs it (one custom call, no casts around it)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_tpucourse import chips, public_kernels, references
from pytest_tpucourse.gates import ceilings

V5E = chips.get_chip("v5e")


def _flash(seq, backward):
    return ceilings.flash_space(lambda fn: fn, q_len=seq, kv_len=seq, backward=backward, causal=False)


def test_flash_is_searched_over_sub_blocks_and_blocks_to_the_sequence_from_the_solutions_blocks():
    space = _flash(4096, backward=False)
    axes = {a.name: a.values for a in space.axes}
    assert axes["block_kv"][-1] == 4096 and axes["block_q"][-1] == 4096 and axes["sub"] == (1, 2, 4, 8)
    labels = [space.label(k) for k in space.start]
    assert labels == ["512x1024/1024", "512x2048/512"]  # the old sweeps' best, the solution's


def test_no_estimate_bounds_the_blocks_the_compiler_does():
    """Large blocks are tried: the compiler's refusal is the edge (tests/test_ceiling_search.py), never an
    estimate of the buffers, which once cut searches short at blocks a v5e compiles."""
    fwd, bwd = _flash(8192, backward=False), _flash(8192, backward=True)
    assert bwd.out_of_space(dict(block_q=1024, block_kv=4096, sub=1, bwd_q=1024, bwd_kv=4096)) is None
    assert fwd.out_of_space(dict(block_q=2048, block_kv=8192, sub=1)) is None
    assert "below 128 keys" in fwd.out_of_space(dict(block_q=128, block_kv=128, sub=2))
    assert fwd.identity() != _Old(fwd).identity()  # a search cut by the estimate is not reused


class _Old:
    def __init__(self, space):
        self.space = space

    def identity(self):
        return f"{self.space.name}: " + "; ".join(f"{a.name} in {list(a.values)}" for a in self.space.axes)


def test_with_its_backward_the_backward_kernels_blocks_are_knobs_of_their_own():
    bwd = _flash(4096, backward=True)
    axes = {a.name: a.values for a in bwd.axes}
    assert axes["bwd_q"] == axes["block_q"] and axes["bwd_kv"] == axes["block_kv"] and bwd.budget > 16
    assert [bwd.label(k) for k in bwd.start] == ["512x1024/1024-bwd512x1024", "512x2048/512-bwd512x2048"]
    assert "bwd_q" not in {a.name for a in _flash(4096, backward=False).axes}


def test_flash_with_backward_blocks_of_its_own_computes_the_gradients():
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 1, 512, 128), jnp.float32) for i in range(3))
    ours = functools.partial(public_kernels.flash_attention, causal=True, block_q=256, block_kv=512, block_k=256,
                             backward_blocks=(128, 256, 128))
    want = jax.grad(lambda *a: references.attention(*a, causal=True).sum(), argnums=(0, 1, 2))(q, k, v)
    got = jax.grad(lambda *a: ours(*a).sum(), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_splash_has_the_fused_backward_on_and_off_only_with_its_backward():
    kw = dict(q_len=8192, kv_len=8192, window=1024)
    fwd = ceilings.splash_space(lambda fn: fn, backward=False, **kw)
    bwd = ceilings.splash_space(lambda fn: fn, backward=True, start=[dict(block_q=128, block_kv=128, sub=1)], **kw)
    assert {a.name: a.values for a in fwd.axes}["fused"] == (False,)
    assert {a.name: a.values for a in bwd.axes}["fused"] == (False, True)
    assert {a.name: a.values for a in bwd.axes}["block_kv"][-1] == 8192
    assert [bwd.label(k) for k in bwd.start] == ["128x128/128-bwd128x128", "512x512/512-bwd512x512",
                                                 "512x1024/512-bwd512x1024"]  # deduplicated


def test_a_rehearsal_on_a_cpu_has_one_configuration_per_setting():
    space = ceilings.splash_space(lambda fn: fn, q_len=128, kv_len=128, backward=True, window=64)
    assert [a.values for a in space.axes] == [(128,), (128,), (1, 2, 4, 8), (128,), (128,), (False, True)]
    assert [space.label(k) for k in space.start] == ["128x128/128-bwd128x128"]


def test_flash_with_sub_blocks_computes_attention():
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 2, 512, 128), jnp.float32) for i in range(3))
    got = public_kernels.flash_attention(q, k, v, causal=True, block_q=256, block_kv=512, block_k=128)
    np.testing.assert_allclose(got, references.attention(q, k, v, causal=True), atol=2e-5, rtol=2e-5)


def _tpu_program(fn, shape, dtype=jnp.bfloat16) -> str:
    """The program XLA:TPU is handed for fn, lowered on this machine (Mosaic, not interpret mode)."""
    from pytest_tpucourse.readers.mosaic import lower_for_tpu

    x = jax.ShapeDtypeStruct(shape, dtype)
    return lower_for_tpu(fn, x, x, x, chip=V5E).as_text()


@pytest.mark.parametrize("block_kv_compute", [None, 256])
def test_splash_forward_is_one_custom_call_with_no_casts_around_it(block_kv_compute):
    """As gate 05 calls it: bf16 q scaled in bf16 (one multiply), the kernel, the output in q's dtype."""
    call = functools.partial(public_kernels.splash_attention, window=256, block_q=256, block_kv=512,
                             block_kv_compute=block_kv_compute)
    text = _tpu_program(call, (1, 2, 1024, 128))
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 1
    assert "stablehlo.convert" not in text
    assert text.count("stablehlo.multiply") == 1


@pytest.mark.parametrize("fused", [False, True])
def test_splash_forward_and_backward_add_no_cast_to_the_kernels_own(fused):
    """Timed with its backward, the wrapper's program holds exactly the converts splash's own kernels
    hold when called on a pre-scaled bf16 q: none of the wrapper's making."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    shape = (1, 2, 1024, 128)
    wrapper = functools.partial(public_kernels.splash_attention, window=256, block=256, fused_backward=fused)
    kernel = public_kernels._splash_kernel(2, 1024, 1024, False, 256, 256, 256, fused, 256)
    step = lambda attention: (lambda q, k, v: jax.vjp(attention, q, k, v)[1](q))  # noqa: E731
    ours = _tpu_program(step(wrapper), shape)
    theirs = _tpu_program(step(lambda q, k, v: kernel(q[0], k[0], v[0])[None]), shape)
    assert isinstance(kernel, sk.SplashAttentionKernel)
    assert ours.count("stablehlo.convert") == theirs.count("stablehlo.convert")
    assert ours.count("@tpu_custom_call") == theirs.count("@tpu_custom_call")


def test_the_old_wrapper_is_caught():
    """The check bites: splash scaled in f32 and cast back, as the ceiling once ran, has converts."""
    def old(q, k, v):
        kernel = public_kernels._splash_kernel(2, 1024, 1024, False, 256, 256, 256, False, 256)
        q = q.astype(jnp.float32) * q.shape[-1] ** -0.5
        return kernel(q[0], k[0], v[0])[None].astype(jnp.bfloat16)

    assert _tpu_program(old, (1, 2, 1024, 128)).count("stablehlo.convert") == 2


def test_a_searched_configuration_is_built_once_so_its_program_compiles_once():
    built = []
    space = ceilings.flash_space(lambda fn: built.append(fn) or fn, q_len=1024, kv_len=1024, backward=False,
                                 causal=False)
    knobs = dict(space.start[0])
    assert space.function(knobs) is space.function(dict(knobs)) and len(built) == 1
