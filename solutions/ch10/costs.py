"""What a matmul costs: FLOPs for the MXU, bytes for HBM.

(m, k) @ (k, n) does m*n dot products of length k: one multiply and one add each,
2*m*k*n FLOPs. At best every array crosses HBM once: x and y are read, the
output is written, all three in the same dtype.
"""


def matmul_cost(m: int, k: int, n: int, itemsize: int) -> tuple[int, int]:
    """(FLOPs, HBM bytes) of (m, k) @ (k, n) with itemsize-byte elements."""
    flops = 2 * m * k * n
    nbytes = (m * k + k * n + m * n) * itemsize
    return flops, nbytes
