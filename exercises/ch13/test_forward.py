"""Graded tests for ch13.forward: flash_forward(q, k, v, *, causal, scale, block_q, block_kv) -> (out, lse)."""

import dataclasses

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, references, tpu_checks
from pytest_tpucourse import strategies as tst

# Blocks of 128 (the lane width, and the smallest kv block JAX's own kernel takes), with
# lengths of 256-768 so every shape spans several blocks while a grid stays a few dozen
# steps (about 2 ms each under TPU interpret mode). Causal masks are aligned top-left:
# query i sees keys 0..i.
BLOCKS = dict(block_q=128, block_kv=128)
SQUARE = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=64,
                             causal=True, dtype="bfloat16")  # 4 x 4 blocks
WIDE = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=768, head_dim=128,
                           causal=True, dtype="float32")  # q_len < kv_len
TALL = tst.AttentionConfig(batch=2, heads=1, kv_heads=1, q_len=512, kv_len=256, head_dim=64,
                           causal=True, dtype="float32")  # q_len > kv_len
DEEP = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=512, head_dim=256,
                           causal=False, dtype="bfloat16")  # head_dim 256


@st.composite
def configs(draw):
    """One of the shapes above, causal or not, in either dtype."""
    cfg = draw(tst.few(SQUARE, WIDE, TALL, DEEP))
    return dataclasses.replace(cfg, causal=draw(st.booleans()), dtype=draw(tst.dtypes()))


def check_forward(impl, cfg, seed, *, scale=None, blocks=BLOCKS, q_scale=1.0):
    q, k, v = cfg.arrays(seed)
    if q_scale != 1.0:
        q = (q.astype("float32") * q_scale).astype(q.dtype)
    checks.assert_matches_reference(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=cfg.causal, scale=scale, **blocks),
        reference=references.ATTENTION_WITH_LSE.bind(causal=cfg.causal, scale=scale),
        names=("out", "lse"),
        note="" if q_scale == 1.0 else f"q = (q.astype('float32') * {q_scale}).astype(q.dtype) first: "
                                       f"logits about 1e4")


@given(cfg=configs(), scale=tst.few(None, 0.3), seed=tst.seeds())
@example(cfg=SQUARE, scale=None, seed=0)
@example(cfg=TALL, scale=None, seed=1)  # and WIDE, non-causal, scale 0.3: the race test
def test_forward_matches_reference(impl, cfg, scale, seed):
    """out and lse, causal or not, f32 and bf16 (f32 accumulation), head_dim 64/128/256."""
    check_forward(impl, cfg, seed, scale=scale)


@pytest.mark.parametrize("cfg, blocks", [
    (dataclasses.replace(SQUARE, q_len=128, kv_len=128), BLOCKS),
    (dataclasses.replace(SQUARE, q_len=64, kv_len=64, dtype="float32", causal=False), {}),
    (dataclasses.replace(WIDE, q_len=128), BLOCKS),
    (dataclasses.replace(TALL, kv_len=128), BLOCKS),
], ids=["one-block", "shorter-than-default-block", "causal-q-one-block", "causal-kv-one-block"])
def test_forward_block_corner_cases(impl, cfg, blocks):
    """A single block exactly; lengths shorter than the default block (clamped to one block
    of the whole length); causal attention whose q or kv length is one block."""
    check_forward(impl, cfg, 2, blocks=blocks)


@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
def test_forward_huge_logits(impl, causal):
    """Logits of about 1e4: exp overflows unless every block is shifted by the running max,
    and the running max moves between kv blocks."""
    cfg = dataclasses.replace(SQUARE, causal=causal, dtype="float32")
    check_forward(impl, cfg, 3, q_scale=1000.0)


@pytest.mark.parametrize("q_len, kv_len", [(200, 512), (512, 200)])
def test_forward_rejects_lengths_the_blocks_do_not_divide(impl, q_len, kv_len):
    """The course's choice: a length that is not a multiple of its block is refused."""
    cfg = dataclasses.replace(SQUARE, q_len=q_len, kv_len=kv_len)
    q, k, v = cfg.arrays(0)
    length = q_len if q_len % 128 else kv_len
    checks.assert_rejects(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=True, **BLOCKS),
        error=ValueError, mentions=(str(length), "128"))


def test_forward_has_no_race_on_two_cores(impl):
    """Two simulated TensorCores split the parallel axes: the kv axis must not be one of them.
    The same call's out and lse are checked too."""
    with tpu_checks.checking_races(impl.forward.flash_forward):
        check_forward(impl, dataclasses.replace(WIDE, causal=False), 0, scale=0.3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_lowers_for_tpu(impl, dtype):
    """The default blocks (128) compile for a TPU: BlockSpecs legal under the (8,128) rule."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu_checks.assert_lowers_for_tpu(impl.forward.flash_forward, q, k, v, causal=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks: the dtype's
    tiling and the scoped-VMEM limit, which the lowering does not check."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu_checks.assert_compiles_for(impl.forward.flash_forward, q, k, v, causal=True)
