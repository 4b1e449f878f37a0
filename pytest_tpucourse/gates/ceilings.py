"""The ceilings' tuning spaces (sweeps.Space): JAX's flash attention and splash attention with every
knob the kernels take free, so "the tuned ceiling" is the fastest of their real space, not of the
blocks someone offered.

  flash (gate 03): block_q, block_kv (the keys a grid step brings in: JAX's block_k_major) up to the
    sequence, and its sub-block block_k = block_kv / sub (the keys its body walks at a time). It starts
    from the largest blocks of the course's earlier sweeps (512 x 1024, 4-9 % faster than 512 x 512 and
    5.6-7.9x faster than JAX's default 128 blocks on a v5e) and the course solution's own blocks (512 x
    2048 in sub-blocks of 512 keys): a slow start would cost the search its slowest timings.
  splash (gate 05): block_q, block_kv, block_kv_compute = block_kv / sub, and, timed with its
    backward, the fused backward (dq computed in the dk/dv kernel) on and off.

A configuration whose working set (`attention_footprint`) exceeds the chip's scoped VMEM, the limit the
compiler applies to a pallas_call that names none (JAX's kernels name none), is out of the space, and a
choice stopped there says so. The estimate is an upper bound of the kernel's own buffers; a candidate
inside it that still fails to compile is an edge named by its failure (sweeps.search).
"""

from __future__ import annotations

import functools

from .. import public_kernels
from ..chips import Chip
from .sweeps import Axis, Space

BLOCKS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SUBS = (1, 2, 4, 8)  # block_kv / the keys the body takes at a time
LANES = 128
SOLUTION_FLASH = dict(block_q=512, block_kv=2048, sub=4)  # solutions/ch13: 512 x 2048 in 512-key sub-blocks


def blocks_to(length: int) -> tuple[int, ...]:
    """The block sizes that tile a length: the powers of two from 128 that divide it, or the length itself."""
    found = tuple(b for b in BLOCKS if b <= length and length % b == 0)
    return found or (length,)


def attention_footprint(block_q: int, block_kv: int, block_k: int, head_dim: int, itemsize: int,
                        backward: bool) -> int:
    """Bytes of VMEM an attention kernel step holds, by its buffers: q, k, v and o blocks double-buffered,
    its row statistics 128 lanes wide, an f32 accumulator, and the (block_q, block_k) f32 scores and
    probabilities (four such tiles and dk, dv accumulators with the backward)."""
    io = 2 * (2 * block_q * head_dim + 2 * block_kv * head_dim) * itemsize
    rows = 2 * 2 * block_q * LANES * 4 + 2 * block_q * LANES * 4  # l, m out (double-buffered) and scratch
    acc = block_q * head_dim * 4
    tiles = (4 if backward else 2) * block_q * block_k * 4
    grads = 2 * block_kv * head_dim * 4 if backward else 0
    return io + rows + acc + tiles + grads


def _vmem_limit(chip: Chip, head_dim: int, itemsize: int, backward: bool, block_k_of):
    scoped = getattr(chip, "scoped_vmem_bytes", None)

    def limit(knobs: dict) -> str | None:
        if knobs["sub"] > knobs["block_kv"] // LANES and knobs["sub"] > 1:
            return f"block_kv {knobs['block_kv']} in {knobs['sub']} sub-blocks is below {LANES} keys a sub-block"
        if scoped is None:
            return None
        need = attention_footprint(knobs["block_q"], knobs["block_kv"], block_k_of(knobs), head_dim, itemsize,
                                   backward)
        if need > scoped:
            return (f"{need / 2 ** 20:.1f} MiB of blocks exceeds the {chip.name}'s {scoped // 2 ** 20} MiB "
                    f"scoped VMEM")
        return None
    return limit


def _label(knobs: dict) -> str:
    sub = knobs["block_kv"] // knobs["sub"]
    return f"{knobs['block_q']}x{knobs['block_kv']}/{sub}" + ("-fused" if knobs.get("fused") else "")


def flash_space(step, *, q_len: int, kv_len: int, head_dim: int, itemsize: int, backward: bool, chip: Chip,
                causal: bool) -> Space:
    """JAX's flash attention: `step(fn)` makes the timed step of an attention function."""
    q_blocks, kv_blocks = blocks_to(q_len), blocks_to(kv_len)

    def build(knobs: dict):
        return step(functools.partial(public_kernels.flash_attention, causal=causal, block_q=knobs["block_q"],
                                      block_kv=knobs["block_kv"], block_k=knobs["block_kv"] // knobs["sub"]))

    starts = [dict(block_q=512, block_kv=1024, sub=1), SOLUTION_FLASH]
    start = tuple(_clamped(k, q_blocks, kv_blocks) for k in starts)
    return _Space("JAX flash attention", (
        Axis("block_q", q_blocks, end=f"the sequence, {q_len}"),
        Axis("block_kv", kv_blocks, end=f"the sequence, {kv_len}"),
        Axis("sub", SUBS)), build, start,
        _vmem_limit(chip, head_dim, itemsize, backward, lambda k: k["block_kv"] // k["sub"]))


def splash_space(step, *, q_len: int, kv_len: int, head_dim: int, itemsize: int, backward: bool, chip: Chip,
                 start=(), **options) -> Space:
    """Splash attention with `options` (window=, causal=): `step(fn)` makes the timed step. start: more
    configurations to try first (a manifest's tuned one, as {block_q, block_kv, sub, fused})."""
    q_blocks, kv_blocks = blocks_to(q_len), blocks_to(kv_len)
    fused = (False, True) if backward else (False,)

    def build(knobs: dict):
        return step(functools.partial(
            public_kernels.splash_attention, block_q=knobs["block_q"], block_kv=knobs["block_kv"],
            block_kv_compute=knobs["block_kv"] // knobs["sub"], fused_backward=knobs["fused"], **options))

    starts = [dict(block_q=128, block_kv=128, sub=1), dict(block_q=512, block_kv=512, sub=1),
              dict(block_q=512, block_kv=1024, sub=2), *start]
    first = tuple(_clamped({"fused": False, **k}, q_blocks, kv_blocks) for k in starts)
    return _Space("splash attention", (
        Axis("block_q", q_blocks, end=f"the sequence, {q_len}"),
        Axis("block_kv", kv_blocks, end=f"the sequence, {kv_len}"),
        Axis("sub", SUBS), Axis("fused", fused)), build, tuple(dict.fromkeys(first)),
        _vmem_limit(chip, head_dim, itemsize, backward, lambda k: k["block_kv"] // k["sub"]))


def _clamped(knobs: dict, q_blocks, kv_blocks) -> dict:
    """A start configuration on a shorter sequence: each block the largest the sequence allows."""
    out = dict(knobs)
    out["block_q"] = max([b for b in q_blocks if b <= knobs["block_q"]] or [q_blocks[0]])
    out["block_kv"] = max([b for b in kv_blocks if b <= knobs["block_kv"]] or [kv_blocks[0]])
    out["sub"] = max(s for s in SUBS if s == 1 or out["block_kv"] // s >= LANES and s <= knobs["sub"])
    return _Frozen(out)


class _Frozen(dict):
    """A start configuration that dedupes (dict.fromkeys) by its items."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


class _Space(Space):
    """A space whose candidates are named 512x2048/512 (block_q x block_kv / keys a body step), -fused."""

    def label(self, knobs: dict) -> str:
        return _label(knobs)
