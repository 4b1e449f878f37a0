"""Where a kernel's time goes: chapter 10's roofline applied to one grid step.

A grid step does some FLOPs on the MXU and moves some bytes through HBM; the two
overlap, so the slower one bounds the step, by the ratio of the two times. A block's
arithmetic intensity against the chip's ridge point says the same thing.

Per step, what reaches HBM is what that step fetches plus its share of what the kernel
reads or writes once per output block (spread over the steps of the reduction axis).
Summed over the grid, the steps give the whole kernel's traffic.
"""


def bottleneck(flops: float, nbytes: float, *, peak_flops: float, hbm_bandwidth: float) -> tuple[str, float]:
    """("compute" or "memory", how many times longer the slower unit takes than the other)."""
    compute = flops / peak_flops
    memory = nbytes / hbm_bandwidth
    if compute >= memory:
        return "compute", compute / memory
    return "memory", memory / compute


def matmul_step(bm: int, bk: int, bn: int, *, k: int, itemsize: int) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one grid step of chapter 11's matmul with a K-long reduction.

    Each step fetches an x block and a y block; the output block is written once every
    k // bk steps.
    """
    flops = 2 * bm * bk * bn
    nbytes = itemsize * (bm * bk + bk * bn) + itemsize * bm * bn / (k // bk)
    return flops, nbytes


def attention_step(block_q: int, block_kv: int, head_dim: int, *, kv_len: int,
                   itemsize: int) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one kv step of chapter 13's forward (non-causal).

    Each step computes q kᵀ and p v (2 * 2 * block_q * block_kv * head_dim FLOPs) and
    fetches a k block and a v block; the q block is read, and the output block and its
    f32 logsumexp written, once every kv_len // block_kv steps.
    """
    flops = 4 * block_q * block_kv * head_dim
    per_q_block = itemsize * 2 * block_q * head_dim + 4 * block_q
    nbytes = itemsize * 2 * block_kv * head_dim + per_q_block / (kv_len // block_kv)
    return flops, nbytes
