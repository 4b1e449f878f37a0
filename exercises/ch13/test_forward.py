"""Graded tests for ch13.forward: flash_forward(q, k, v, *, causal, scale, block_q, block_kv) -> (out, lse)."""

import dataclasses

import pytest
from hypothesis import example, given

from pytest_tpucourse import checks, references, ir, tpu
from pytest_tpucourse import strategies as tst

# On a TPU each test runs natively for the chip's values, and again under TPU interpret mode on the
# host's CPU for what only the interpreter shows (grading/placement.py).
pytestmark = pytest.mark.host_interpret("races, DMA orders, out-of-bounds block indices and memory never written")

# Blocks of 128 (the lane width, and the smallest kv block JAX's own kernel takes), with
# lengths of 256-768 so every shape spans several blocks while a grid stays a few dozen
# steps (about 2 ms each under TPU interpret mode). Causal masks are aligned top-left:
# query i sees keys 0..i. Block sizes are also drawn unequal (block_q = 2 · block_kv and
# block_kv = 2 · block_q), where a mask's row offset or a skip formula that mixes the two
# up goes wrong; every length is a multiple of 256, so each set divides it.
BLOCKS = dict(block_q=128, block_kv=128)
Q_TWICE_KV, KV_TWICE_Q = tst.unequal_blocks(("block_q", "block_kv"), (256, 128))
SQUARE = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=64,
                             causal=True, dtype="bfloat16")  # 4 x 4 blocks
WIDE = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=768, head_dim=128,
                           causal=True, dtype="float32")  # q_len < kv_len
TALL = tst.AttentionConfig(batch=2, heads=1, kv_heads=1, q_len=512, kv_len=256, head_dim=64,
                           causal=True, dtype="float32")  # q_len > kv_len
DEEP = tst.AttentionConfig(batch=1, heads=1, kv_heads=1, q_len=256, kv_len=512, head_dim=256,
                           causal=False, dtype="bfloat16")  # head_dim 256


def check_forward(impl, cfg, seed, *, scale=None, blocks=BLOCKS, kind="normal"):
    q, k, v = cfg.arrays(seed, kind)
    checks.assert_matches_reference(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=cfg.causal, scale=scale, **blocks),
        reference=references.ATTENTION_WITH_LSE.bind(causal=cfg.causal, scale=scale),
        names=("out", "lse"),
        note=f"q, k, v = AttentionConfig({cfg}).arrays({seed}" + ("" if kind == "normal" else f", {kind!r}") + ")")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_lowers_for_tpu(impl, dtype):
    """The default blocks (clamped to the 512 length) lower for a TPU: BlockSpecs legal under
    the (8,128) rule."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu.assert_lowers_for_tpu(impl.forward.flash_forward, q, k, v, causal=True, compile_ahead=True)


# The unequal block sets run as explicit examples, so every profile grades them; drawn
# examples take any set (each drawn configuration compiles a program of its own anyway).
@given(cfg=tst.attention_configs(SQUARE, WIDE, TALL, DEEP), scale=tst.few(None, 0.3),
       blocks=tst.few(BLOCKS, Q_TWICE_KV, KV_TWICE_Q), seed=tst.seeds())
@example(cfg=SQUARE, scale=None, blocks=BLOCKS, seed=0)
@example(cfg=dataclasses.replace(WIDE, causal=False), scale=0.3, blocks=KV_TWICE_Q, seed=0)
@example(cfg=TALL, scale=None, blocks=BLOCKS, seed=1)
@example(cfg=dataclasses.replace(SQUARE, dtype="float32"), scale=None, blocks=Q_TWICE_KV, seed=0)
@example(cfg=DEEP, scale=0.3, blocks=BLOCKS, seed=2)
def test_forward_matches_reference(impl, cfg, scale, blocks, seed):
    """out and lse, causal or not, f32 and bf16 (f32 accumulation), head_dim 64/128/256,
    equal and unequal block sizes."""
    check_forward(impl, cfg, seed, scale=scale, blocks=blocks)


@pytest.mark.parametrize("cfg, blocks", [
    (dataclasses.replace(SQUARE, q_len=128, kv_len=128), BLOCKS),
    (dataclasses.replace(SQUARE, q_len=64, kv_len=64, dtype="float32", causal=False), {}),
    (dataclasses.replace(WIDE, q_len=128), Q_TWICE_KV),
    (dataclasses.replace(TALL, kv_len=128), KV_TWICE_Q),
], ids=["one-block", "shorter-than-default-block", "causal-q-below-its-block",
        "causal-kv-below-its-block"])
def test_forward_block_corner_cases(impl, cfg, blocks):
    """A single block exactly; lengths shorter than the default block (clamped to one block
    of the whole length); causal attention whose q or kv length is below its block (256,
    clamped to the length, 128) while the other length spans several blocks."""
    check_forward(impl, cfg, 2, blocks=blocks)


@pytest.mark.parametrize("kind, causal", [("huge_logits", False), ("huge_logits", True),
                                          ("negative_first_key", True)],
                         ids=["huge-logits", "huge-logits-causal", "negative-first-key-causal"])
def test_forward_input_kinds(impl, kind, causal):
    """Logits of about 1e4: exp overflows unless every block is shifted by the running max,
    and the running max moves between kv blocks. Every query scoring key 0 at about -1e4,
    which under the causal mask is row 0's only key: a running max started at 0 instead of
    -inf makes that row's sum exp(-1e4) = 0."""
    check_forward(impl, dataclasses.replace(SQUARE, causal=causal, dtype="float32"), 3, kind=kind)


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
    One batch, one head and 3 q blocks: the parallel extents before the kv axis multiply to
    an odd number, so the cores' split falls inside one q block's kv walk. The same call's
    out and lse are checked too: one compiled program for both."""
    cfg = dataclasses.replace(WIDE, q_len=384, kv_len=512, head_dim=64, causal=False)
    with tpu.checking_races(impl.forward.flash_forward):
        check_forward(impl, cfg, 4)


def test_forward_walks_kv_in_block_kv_steps(impl):
    """One grid step per (q block, kv block) of every batch and head: the keys are walked in
    Skv/block_kv steps. A forward that takes every key at once gives right values wherever VMEM
    holds all of k and v; its grid shows it. Non-causal (a causal kernel may leave the blocks
    above the diagonal out of its grid); read off the traced program, nothing compiles."""
    cfg, blocks = dataclasses.replace(SQUARE, causal=False), Q_TWICE_KV
    q, k, v = cfg.arrays(0)
    ir.assert_grid_steps(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=False, **blocks),
        extents={"B": cfg.batch, "H": cfg.heads, "Sq/block_q": cfg.q_len // blocks["block_q"],
                 "Skv/block_kv": cfg.kv_len // blocks["block_kv"]},
        why="block_kv sets how many keys one step holds in VMEM: all of them at once is a (Skv, D) "
            "block of k and one of v per step, at Skv = 32768, D = 128 in bf16 8 MiB each, 32 MiB "
            "double-buffered: more than a v5e's scoped VMEM, at a length flash attention exists for.",
        note=str(cfg))


def test_forward_never_materialises_the_scores(impl):
    """Nothing outside the kernel as large as one head's (Sq, Skv) score matrix: every array
    the forward legitimately holds (q, k, v, out, lse) is smaller at this shape."""
    cfg = dataclasses.replace(SQUARE, kv_len=1024)
    q, k, v = cfg.arrays(5)
    ir.assert_no_value_as_large_as(
        impl.forward.flash_forward, (q, k, v), kwargs=dict(causal=True, **BLOCKS),
        elements=cfg.q_len * cfg.kv_len, what=f"one head's ({cfg.q_len}, {cfg.kv_len}) score matrix",
        why="Flash attention keeps the scores in VMEM, one (block_q, block_kv) tile at a time.",
        note=str(cfg))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_forward_compiles_for_tpu(impl, dtype):
    """The real compiler (libtpu, ahead of time for a v5e) accepts the default blocks: the dtype's
    tiling and the scoped-VMEM limit, which the lowering does not check."""
    cfg = tst.AttentionConfig(batch=1, heads=2, kv_heads=2, q_len=512, kv_len=512, head_dim=128,
                              causal=True, dtype=dtype)
    q, k, v = cfg.arrays(0)
    tpu.assert_compiles_for(impl.forward.flash_forward, q, k, v, causal=True)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): a configuration, scale and block set
    the grader draws, and huge logits; that the scores never reach HBM is the tree's own
    process's to see."""
    base = (SQUARE, WIDE, TALL, DEEP)[int(rng.integers(4))]
    cfg = dataclasses.replace(base, causal=bool(rng.integers(2)), dtype=str(rng.choice(tst.DTYPES)))
    scale, blocks = (None, 0.3)[int(rng.integers(2))], (BLOCKS, Q_TWICE_KV, KV_TWICE_Q)[int(rng.integers(3))]
    cases = []
    for cfg, scale, blocks, kind in ((cfg, scale, blocks, "normal"), (SQUARE, None, BLOCKS, "huge_logits")):
        cases.append(checks.trusted.values(
            "flash_forward", cfg.arrays(checks.trusted.seed(rng), kind),
            kwargs=dict(causal=cfg.causal, scale=scale, **blocks), names=("out", "lse"),
            reference=references.ATTENTION_WITH_LSE.bind(causal=cfg.causal, scale=scale),
            label=f"flash_forward({cfg}, scale={scale}, {blocks}) on {kind} values"))
    return cases


TRUSTED = checks.trusted.Cases(_trusted_cases)
