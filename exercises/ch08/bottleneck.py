"""Exercise ch08.bottleneck: which unit bounds a grid step (README: "Where the time goes")."""


def bottleneck(flops: float, nbytes: float, *, peak_flops: float, hbm_bandwidth: float) -> tuple[str, float]:
    """("compute" or "memory", factor): the unit that takes longer, and its time over the other's (>= 1).

    Compute time is flops / peak_flops, memory time nbytes / hbm_bandwidth; a tie is "compute".
    """
    raise NotImplementedError("write bottleneck(): compare the compute time with the memory time")


def matmul_step(bm: int, bk: int, bn: int, *, k: int, itemsize: int) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one grid step of chapter 11's matmul, K = k.

    A step multiplies an x block (bm, bk) by a y block (bk, bn), both fetched from HBM;
    the (bm, bn) output block is written once every k // bk steps: count that share.
    """
    raise NotImplementedError("write matmul_step(): the step's MACs and what it fetches, plus its share of the write")


def attention_step(block_q: int, block_kv: int, head_dim: int, *, kv_len: int,
                   itemsize: int) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one kv step of chapter 13's (non-causal) flash forward.

    A step computes s = q kᵀ and p v for a (block_q, head_dim) q block against a
    (block_kv, head_dim) k block and v block, both fetched; once every kv_len // block_kv
    steps the q block is read and the output block and its float32 logsumexp (block_q
    values) are written: count that share.
    """
    raise NotImplementedError("write attention_step(): two matmuls, a k and a v block, a share of q, out and lse")
