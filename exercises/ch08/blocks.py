"""Exercise ch08.blocks: block sizes that fit a VMEM limit (README: "Picking blocks")."""

from . import vmem  # noqa: F401  (vmem.vmem_footprint counts a candidate's VMEM)


def pick_blocks(m: int, k: int, n: int, *, dtype, peak_flops: float, hbm_bandwidth: float,
                mxu_width: int, vmem_limit_bytes: int) -> tuple[int, int, int]:
    """(bm, bk, bn) for chapter 11's matmul of (m, k) @ (k, n) in `dtype`.

    Candidates along each dimension: the multiples of mxu_width that divide it, and the
    whole dimension. Among the triples whose VMEM (x, y and the output two buffers each,
    plus a (bm, bn) float32 accumulator) is at most vmem_limit_bytes, return one with the
    least roofline time max(2mkn / peak_flops, HBM bytes / hbm_bandwidth), where the
    kernel's HBM bytes are itemsize * (m*k*(n/bn) + k*n*(m/bm) + m*n). Raise ValueError
    naming vmem_limit_bytes when no triple fits.
    """
    raise NotImplementedError("write pick_blocks(): try every legal triple that fits; keep the fastest")
