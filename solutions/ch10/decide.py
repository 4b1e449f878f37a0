"""The roofline used for a decision: how many rows a matmul needs before the MXUs, not HBM, set its time.

An (m, k) @ (k, n) matmul computes for 2mkn / peak seconds and moves its three arrays through HBM in
itemsize (mk + kn + mn) / bandwidth. It is compute-bound when the first is at least the second (a tie
counts as compute, as everywhere in the course):

    m (2kn / peak - itemsize (k + n) / bandwidth) >= itemsize kn / bandwidth

The bracket is what each extra row adds to the compute time beyond its own bytes. Where it is not
positive, no batch helps: the intensity only tends to 2kn / (itemsize (k + n)) as m grows, and that is
not above the ridge. Solved in exact fractions, since a float on the boundary would answer one row off.
"""

import math
from fractions import Fraction


def rows_to_compute_bound(k: int, n: int, *, itemsize: int, peak_flops: float, hbm_bandwidth: float) -> int:
    """The fewest rows m for which (m, k) @ (k, n) is compute-bound; ValueError naming k and n where
    no m is."""
    peak, bandwidth = Fraction(peak_flops), Fraction(hbm_bandwidth)
    per_row = 2 * k * n / peak - itemsize * (k + n) / bandwidth
    if per_row <= 0:
        raise ValueError(f"no row count makes a (m, {k}) @ ({k}, {n}) matmul compute-bound: its intensity "
                         f"tends to {2 * k * n / (itemsize * (k + n)):.1f} FLOP/byte, not above the ridge "
                         f"{peak_flops / hbm_bandwidth:.1f}")
    return max(1, math.ceil(itemsize * k * n / bandwidth / per_row))
