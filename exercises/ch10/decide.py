"""Exercise ch10.decide: the roofline used for a decision (README: "The roofline decides")."""


def rows_to_compute_bound(k: int, n: int, *, itemsize: int, peak_flops: float, hbm_bandwidth: float) -> int:
    """The fewest rows m for which an (m, k) @ (k, n) matmul is compute-bound on a chip.

    k, n: positive ints; itemsize: bytes per element of all three arrays; peak_flops, hbm_bandwidth:
    the chip's FLOP/s and HBM bytes/s. The matmul does 2mkn FLOPs and moves (mk + kn + mn) elements;
    compute-bound means its compute time is at least its memory time (a tie counts as compute).
    Return an int >= 1. Where no m makes it compute-bound (each row adds at least as much memory time
    as compute time: exactly as much included), raise ValueError naming k and n.
    """
    raise NotImplementedError("write rows_to_compute_bound(): the first m whose compute time is not below its memory time")
