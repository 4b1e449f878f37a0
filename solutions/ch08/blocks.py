"""Block sizes for chapter 11's matmul that fit a VMEM limit and minimise its roofline time.

The kernel reads x once per column block and y once per row block, and writes the
output once: HBM bytes = itemsize * (M*K*(N/bn) + K*N*(M/bm) + M*N). Its useful FLOPs
do not depend on the blocks, but the MXU's do: it multiplies (bm, bk) @ (bk, bn) with
bk and bn padded to its width and bm to the rows of one push (8 sublanes of 32-bit
words: 8 f32 rows, 16 bf16), so the compute time is 2MKN / (peak * mxu_efficiency).
The roofline time max(compute, bytes / bandwidth) falls as bm and bn grow, until the
kernel is compute-bound or the blocks no longer fit: x, y and the output
double-buffered, plus the (bm, bn) f32 accumulator (vmem.py). bk changes only the VMEM
and the MXU's padding.

Candidates are the legal blocks that divide their dimension (chapter 11's matmul has no
mask for a ragged block): the (8, 128) rule makes bm a multiple of 8 and bk, bn
multiples of 128 (bk is x's last dimension), or the whole dimension. Multiples of the
MXU width are not a rule; the padding in the time is what favours them. Every
candidate triple is tried: there are few of them, and brute force cannot miss the
optimum.
"""

import itertools

import jax.numpy as jnp

from . import mxu, vmem

SUBLANES, LANES = 8, 128


def candidates(dim: int, multiple: int) -> list[int]:
    """Legal block sizes along one dimension that divide it: multiples of `multiple`, and dim itself."""
    return sorted({b for b in range(multiple, dim + 1, multiple) if dim % b == 0} | {dim})


def matmul_vmem(bm: int, bk: int, bn: int, dtype) -> int:
    """VMEM of chapter 11's matmul at these blocks: x, y, out double-buffered, f32 accumulator."""
    blocks = [((bm, bk), dtype, 2), ((bk, bn), dtype, 2), ((bm, bn), dtype, 2)]
    return vmem.vmem_footprint(blocks, scratch=[((bm, bn), "float32")])


def matmul_seconds(m, k, n, bm, bk, bn, *, dtype, peak_flops, hbm_bandwidth, mxu_width) -> float:
    """Roofline time of the tiled matmul: the MXU's padded FLOPs against the HBM bytes these blocks move."""
    itemsize = jnp.dtype(dtype).itemsize
    nbytes = itemsize * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    push_rows = SUBLANES * max(1, 4 // itemsize)  # rows of one vreg: 8 sublanes of 32-bit words
    efficiency = mxu.mxu_efficiency(bm, bk, bn, mxu_width=mxu_width, sublanes=push_rows)
    return max(2 * m * k * n / (peak_flops * efficiency), nbytes / hbm_bandwidth)


def pick_blocks(m: int, k: int, n: int, *, dtype, peak_flops: float, hbm_bandwidth: float,
                mxu_width: int, vmem_limit_bytes: int) -> tuple[int, int, int]:
    """(bm, bk, bn) that fit vmem_limit_bytes with the least roofline time; ValueError if none fits."""
    best = None
    for bm, bk, bn in itertools.product(candidates(m, SUBLANES), candidates(k, LANES), candidates(n, LANES)):
        if matmul_vmem(bm, bk, bn, dtype) > vmem_limit_bytes:
            continue
        key = (matmul_seconds(m, k, n, bm, bk, bn, dtype=dtype, peak_flops=peak_flops,
                              hbm_bandwidth=hbm_bandwidth, mxu_width=mxu_width), matmul_vmem(bm, bk, bn, dtype))
        if best is None or key < best[0]:
            best = (key, (bm, bk, bn))
    if best is None:
        raise ValueError(f"no blocks of a {m}x{k}x{n} {jnp.dtype(dtype).name} matmul fit "
                         f"vmem_limit_bytes={vmem_limit_bytes}")
    return best[1]
