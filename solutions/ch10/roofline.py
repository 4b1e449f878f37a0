"""The roofline floor: the least time an op can take on a chip.

An op needs its FLOPs done by the MXUs and its bytes moved through HBM. The two
overlap, so the slower one sets the time: floor = max(compute, memory).
"""


def floor_seconds(flops: float, nbytes: float, peak_flops: float, hbm_bandwidth: float) -> float:
    """max(flops / peak_flops, nbytes / hbm_bandwidth), in seconds."""
    compute = flops / peak_flops
    memory = nbytes / hbm_bandwidth
    return max(compute, memory)
