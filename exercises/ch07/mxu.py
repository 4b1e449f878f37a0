"""Exercise ch07.mxu: predict the MXU instructions one grid step of a bf16 matmul block issues.

ch11's matmul multiplies a (bm, bk) block of x by a (bk, bn) block of y each grid
step. In the compiler's final bundles (`tpucourse compile ... --chip v5e`), each
`vmatmul` instruction pushes rows of the left operand through the weights one
MXU holds. Predict how many per grid step.
"""


def vmatmuls_per_step(bm: int, bk: int, bn: int, chip: str) -> int:
    """vmatmul instructions per grid step for a (bm, bk) @ (bk, bn) bf16 block product on `chip`
    ("v4", "v5e", "v5p": four 128 x 128 MXUs per core; "v6e", "v7x": two 256 x 256 MXUs).

    bm is a multiple of 16, bk and bn multiples of 128.
    """
    raise NotImplementedError("write vmatmuls_per_step(): pushes per weight tile x weight tiles")
