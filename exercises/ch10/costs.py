"""Exercise ch10.costs: FLOPs and HBM bytes of a matmul (README: "Counting")."""


def matmul_cost(m: int, k: int, n: int, itemsize: int) -> tuple[int, int]:
    """(FLOPs, HBM bytes) of x (m, k) @ y (k, n) -> (m, n), every element itemsize bytes.

    Count a multiply-add as 2 FLOPs. Count the bytes the best schedule moves:
    every array crosses HBM exactly once. Return Python ints.
    """
    raise NotImplementedError("write matmul_cost(): 2mkn FLOPs; bytes for every array that crosses HBM")
