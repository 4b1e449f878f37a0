"""Block sizes for chapter 11's matmul that fit a VMEM limit and minimise its roofline time.

The kernel reads x once per column block and y once per row block, and writes the
output once: HBM bytes = itemsize * (M*K*(N/bn) + K*N*(M/bm) + M*N). Its FLOPs do not
depend on the blocks, so the roofline time max(2MKN / peak, bytes / bandwidth) falls as
bm and bn grow, until the kernel is compute-bound or the blocks no longer fit: x, y and
the output double-buffered, plus the (bm, bn) f32 accumulator (vmem.py). bk changes only
the VMEM, so the smallest one is best.

Candidates along a dimension are the multiples of the MXU width that divide it, and
the whole dimension (always a legal block). Every candidate triple is tried: there are
few of them, and brute force cannot miss the optimum.
"""

import itertools

import jax.numpy as jnp

from . import vmem


def candidates(dim: int, width: int) -> list[int]:
    """Legal block sizes along one dimension: multiples of the MXU width dividing it, and dim itself."""
    return sorted({b for b in range(width, dim + 1, width) if dim % b == 0} | {dim})


def matmul_vmem(bm: int, bk: int, bn: int, dtype) -> int:
    """VMEM of chapter 11's matmul at these blocks: x, y, out double-buffered, f32 accumulator."""
    blocks = [((bm, bk), dtype, 2), ((bk, bn), dtype, 2), ((bm, bn), dtype, 2)]
    return vmem.vmem_footprint(blocks, scratch=[((bm, bn), "float32")])


def matmul_seconds(m, k, n, bm, bn, *, itemsize, peak_flops, hbm_bandwidth) -> float:
    """Roofline time of the tiled matmul: its FLOPs against the HBM bytes these blocks move."""
    nbytes = itemsize * (m * k * (n // bn) + k * n * (m // bm) + m * n)
    return max(2 * m * k * n / peak_flops, nbytes / hbm_bandwidth)


def pick_blocks(m: int, k: int, n: int, *, dtype, peak_flops: float, hbm_bandwidth: float,
                mxu_width: int, vmem_limit_bytes: int) -> tuple[int, int, int]:
    """(bm, bk, bn) that fit vmem_limit_bytes with the least roofline time; ValueError if none fits."""
    itemsize = jnp.dtype(dtype).itemsize
    best = None
    for bm, bk, bn in itertools.product(candidates(m, mxu_width), candidates(k, mxu_width),
                                        candidates(n, mxu_width)):
        if matmul_vmem(bm, bk, bn, dtype) > vmem_limit_bytes:
            continue
        key = (matmul_seconds(m, k, n, bm, bn, itemsize=itemsize, peak_flops=peak_flops,
                              hbm_bandwidth=hbm_bandwidth), matmul_vmem(bm, bk, bn, dtype))
        if best is None or key < best[0]:
            best = (key, (bm, bk, bn))
    if best is None:
        raise ValueError(f"no blocks of a {m}x{k}x{n} {jnp.dtype(dtype).name} matmul fit "
                         f"vmem_limit_bytes={vmem_limit_bytes}")
    return best[1]
