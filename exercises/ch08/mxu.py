"""Exercise ch08.mxu: how much of the MXU a matmul fills (README: "The MXU pads")."""


def mxu_efficiency(m: int, k: int, n: int, *, mxu_width: int, sublanes: int = 8) -> float:
    """Useful MACs / padded MACs of an (m, k) @ (k, n) matmul, a float in (0, 1].

    The MXU takes k and n in whole multiples of mxu_width (128 or 256) and m in whole
    multiples of `sublanes` rows.
    """
    raise NotImplementedError("write mxu_efficiency(): m*k*n over the product of the padded dimensions")
