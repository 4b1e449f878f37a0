"""Exercise ch10.roofline: the floor of an op on a chip (README: "The roofline")."""


def floor_seconds(flops: float, nbytes: float, peak_flops: float, hbm_bandwidth: float) -> float:
    """The roofline floor in seconds.

    flops: the op's floating-point operations; nbytes: the bytes it must move
    through HBM; peak_flops: the chip's FLOP/s; hbm_bandwidth: its HBM bytes/s.
    All positive. The MXU and HBM work at the same time: the slower one sets the floor.
    """
    raise NotImplementedError("write floor_seconds(): the larger of the compute time and the memory time")
