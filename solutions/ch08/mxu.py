"""How much of the MXU a matmul uses.

The MXU multiplies tiles of a fixed size: a (m, k) @ (k, n) block is fed to it with k
and n padded to the MXU width (128 up to v5p, 256 from v6e) and m to whole sublanes (8
rows). The padded multiply-accumulates cost time and compute nothing: the efficiency is
the useful MACs over the padded MACs.
"""


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxu_efficiency(m: int, k: int, n: int, *, mxu_width: int, sublanes: int = 8) -> float:
    """Useful MACs / padded MACs of an (m, k) @ (k, n) matmul on an mxu_width-wide MXU."""
    useful = m * k * n
    padded = _round_up(m, sublanes) * _round_up(k, mxu_width) * _round_up(n, mxu_width)
    return useful / padded
