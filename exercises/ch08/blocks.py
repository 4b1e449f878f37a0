"""Exercise ch08.blocks: block sizes that fit a VMEM limit (README: "Picking blocks")."""

from . import mxu, vmem  # noqa: F401  (vmem.vmem_footprint counts a candidate's VMEM; mxu.mxu_efficiency its padding)


def pick_blocks(m: int, k: int, n: int, *, dtype, peak_flops: float, hbm_bandwidth: float,
                mxu_width: int, vmem_limit_bytes: int) -> tuple[int, int, int]:
    """(bm, bk, bn) for chapter 11's matmul of (m, k) @ (k, n) in `dtype`.

    Candidates: legal blocks that divide their dimension (the (8, 128) rule: bm a multiple
    of 8, bk and bn multiples of 128, or the whole dimension). Among the triples whose
    VMEM (x, y and the output two buffers each, plus a (bm, bn) float32 accumulator) is
    at most vmem_limit_bytes, return one with the least roofline time
    max(2mkn / (peak_flops * e), HBM bytes / hbm_bandwidth), where e is the MXU
    efficiency of one (bm, bk) @ (bk, bn) block (k and n padded to mxu_width, m to the
    rows of one push: 8 * (4 // itemsize)) and the kernel's HBM bytes are
    itemsize * (m*k*(n/bn) + k*n*(m/bm) + m*n). Raise ValueError naming
    vmem_limit_bytes when no triple fits.
    """
    raise NotImplementedError("write pick_blocks(): try every legal triple that fits; keep the fastest")
