"""The ceilings' tuning spaces (sweeps.Space): JAX's flash attention and splash attention with every
knob the kernels take free, so "the tuned ceiling" is the fastest of their real space, not of the
blocks someone offered.

  flash (gate 03): block_q, block_kv (the keys a grid step brings in: JAX's block_k_major) up to the
    sequence, and its sub-block block_k = block_kv / sub (the keys its body walks at a time); timed with
    its backward, the backward kernels' own block_q and block_kv (bwd_q, bwd_kv), free of the forward's.
    It starts
    from the largest blocks of the course's earlier sweeps (512 x 1024, 4-9 % faster than 512 x 512 and
    5.6-7.9x faster than JAX's default 128 blocks on a v5e) and the course solution's own blocks (512 x
    2048 in sub-blocks of 512 keys): a slow start would cost the search its slowest timings.
  splash (gate 05): block_q, block_kv, block_kv_compute = block_kv / sub, and, timed with its
    backward, the backward kernels' block_q and block_kv (bwd_q, bwd_kv) and the fused backward (dq
    computed in the dk/dv kernel) on and off.

The chip's scoped VMEM (the limit the compiler applies to a pallas_call that names none: JAX's kernels
name none) bounds the blocks where the compiler says so: a candidate is compiled and tried, and one the
compiler refuses is an edge named by the compiler's words (sweeps.search), never an estimate of the
kernel's buffers, which would cut a search short at blocks the chip compiles.
"""

from __future__ import annotations

import functools

from .. import public_kernels
from .sweeps import Axis, Space

BLOCKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SUBS = (1, 2, 4, 8)  # block_kv / the keys the body takes at a time
LANES = 128
SOLUTION_FLASH = dict(block_q=512, block_kv=2048, sub=4)  # solutions/ch13: 512 x 2048 in 512-key sub-blocks


def blocks_to(length: int) -> tuple[int, ...]:
    """The block sizes that tile a length: the powers of two from 128 that divide it, or the length itself."""
    found = tuple(b for b in BLOCKS if b <= length and length % b == 0)
    return found or (length,)


EDGE = "blocks bounded by the compiler's refusals"  # part of a space's identity: searches cut by an estimate are not reused


def _sub_block_rule(knobs: dict) -> str | None:
    """Why a sub-block is not a configuration of the kernel: fewer than a lane's width of keys."""
    if knobs["sub"] > knobs["block_kv"] // LANES and knobs["sub"] > 1:
        return f"block_kv {knobs['block_kv']} in {knobs['sub']} sub-blocks is below {LANES} keys a sub-block"
    return None


def _label(knobs: dict) -> str:
    sub = knobs["block_kv"] // knobs["sub"]
    label = f"{knobs['block_q']}x{knobs['block_kv']}/{sub}"
    if "bwd_q" in knobs:
        label += f"-bwd{knobs['bwd_q']}x{knobs['bwd_kv']}"
    return label + ("-fused" if knobs.get("fused") else "")


def _backward_axes(q_blocks, kv_blocks, q_len: int, kv_len: int, backward: bool) -> tuple:
    """The backward kernels' blocks, an axis each, where the step is timed with its backward."""
    if not backward:
        return ()
    return (Axis("bwd_q", q_blocks, end=f"the sequence, {q_len}"),
            Axis("bwd_kv", kv_blocks, end=f"the sequence, {kv_len}"))


def _with_backward(knobs: dict, backward: bool) -> dict:
    """A start configuration timed with its backward: the backward's blocks the forward's, to start."""
    return {**knobs, "bwd_q": knobs["block_q"], "bwd_kv": knobs["block_kv"]} if backward else dict(knobs)


def flash_space(step, *, q_len: int, kv_len: int, backward: bool, causal: bool) -> Space:
    """JAX's flash attention: `step(fn)` makes the timed step of an attention function."""
    q_blocks, kv_blocks = blocks_to(q_len), blocks_to(kv_len)

    def build(knobs: dict):
        block_k = knobs["block_kv"] // knobs["sub"]  # the backward's sub-block too (flash_attention clamps it)
        bwd = (knobs["bwd_q"], knobs["bwd_kv"], block_k) if backward else None
        return step(functools.partial(public_kernels.flash_attention, causal=causal, block_q=knobs["block_q"],
                                      block_kv=knobs["block_kv"], block_k=block_k, backward_blocks=bwd))

    starts = [dict(block_q=512, block_kv=1024, sub=1), SOLUTION_FLASH]
    start = tuple(_clamped(_with_backward(k, backward), q_blocks, kv_blocks) for k in starts)
    return _Space("JAX flash attention", (
        Axis("block_q", q_blocks, end=f"the sequence, {q_len}"),
        Axis("block_kv", kv_blocks, end=f"the sequence, {kv_len}"),
        Axis("sub", SUBS), *_backward_axes(q_blocks, kv_blocks, q_len, kv_len, backward)), build, start,
        _sub_block_rule, budget=24 if backward else 16, edge=EDGE)


def splash_space(step, *, q_len: int, kv_len: int, backward: bool, start=(), **options) -> Space:
    """Splash attention with `options` (window=, causal=): `step(fn)` makes the timed step. start: more
    configurations to try first (a manifest's tuned one, as {block_q, block_kv, sub, fused})."""
    q_blocks, kv_blocks = blocks_to(q_len), blocks_to(kv_len)
    fused = (False, True) if backward else (False,)

    def build(knobs: dict):
        bwd = dict(backward_blocks=(knobs["bwd_q"], knobs["bwd_kv"])) if backward else {}
        return step(functools.partial(
            public_kernels.splash_attention, block_q=knobs["block_q"], block_kv=knobs["block_kv"],
            block_kv_compute=knobs["block_kv"] // knobs["sub"], fused_backward=knobs["fused"], **bwd, **options))

    starts = [dict(block_q=128, block_kv=128, sub=1), dict(block_q=512, block_kv=512, sub=1),
              dict(block_q=512, block_kv=1024, sub=2), *start]
    first = tuple(_clamped(_with_backward({"fused": False, **k}, backward), q_blocks, kv_blocks) for k in starts)
    return _Space("splash attention", (
        Axis("block_q", q_blocks, end=f"the sequence, {q_len}"),
        Axis("block_kv", kv_blocks, end=f"the sequence, {kv_len}"),
        Axis("sub", SUBS), *_backward_axes(q_blocks, kv_blocks, q_len, kv_len, backward), Axis("fused", fused)),
        build, tuple(dict.fromkeys(first)), _sub_block_rule, budget=24 if backward else 16, edge=EDGE)


def _clamped(knobs: dict, q_blocks, kv_blocks) -> dict:
    """A start configuration on a shorter sequence: each block the largest the sequence allows."""
    out = dict(knobs)
    out["block_q"] = max([b for b in q_blocks if b <= knobs["block_q"]] or [q_blocks[0]])
    out["block_kv"] = max([b for b in kv_blocks if b <= knobs["block_kv"]] or [kv_blocks[0]])
    out["sub"] = max(s for s in SUBS if s == 1 or out["block_kv"] // s >= LANES and s <= knobs["sub"])
    for name, blocks in (("bwd_q", q_blocks), ("bwd_kv", kv_blocks)):
        if name in out:
            out[name] = max([b for b in blocks if b <= knobs[name]] or [blocks[0]])
    return _Frozen(out)


class _Frozen(dict):
    """A start configuration that dedupes (dict.fromkeys) by its items."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


class _Space(Space):
    """A space whose candidates are named 512x2048/512 (block_q x block_kv / keys a body step), -fused."""

    def label(self, knobs: dict) -> str:
        return _label(knobs)
