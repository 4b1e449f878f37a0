"""Gate 04's size, derived: what a ring collective matmul, its compute alone, and the same kernel gathering
first should take on a chip, from the chip's figures (exercises/ch14/README.md, "Gate 04's size").

Arithmetic on published rates, not a measurement: each time is its compute at the chip's peak plus what
the schedule leaves exposed. The kernel has a grid over block_n columns of w_j, so only the first block
of w_j comes in before any compute and only the last block of the output leaves after it; on the ring,
the first grid step's matmul of each chunk (chunk x K x block_n) is what hides the next chunk's hop.
`LATENCY` stands for each fixed round trip (the barrier, each credit): about a microsecond between
neighbours, an estimate the measured rows settle.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..chips import Chip

LATENCY = 1e-6  # seconds: one handshake with a neighbour (barrier or credit), an estimate


@dataclass(frozen=True)
class Budget:
    """Seconds per call on one chip of the ring (floor, compute alone) or on the ring."""

    floor: float  # the roofline floor of one chip's share: its FLOPs at peak, or its bytes at HBM rate
    compute: float  # the matmul's FLOPs at peak
    step_compute: float  # one chunk times the first block of columns: what hides one hop
    hop: float  # one chunk over one ICI link, one way
    edges: float  # the first w block in and the last output block out, outside any compute
    compute_alone: float  # the kernel on a ring of one: no hop, no credit
    overlapped: float  # the ring, each hop behind its chunk's matmul where the matmul is long enough
    gathered_first: float  # the ring gathering every chunk first, then multiplying

    @property
    def alone_over_floor(self) -> float:
        return self.compute_alone / self.floor

    @property
    def overlapped_ratio(self) -> float:
        return self.overlapped / self.compute_alone

    @property
    def gathered_first_ratio(self) -> float:
        return self.gathered_first / self.compute_alone


def collective_matmul(chip: Chip, m: int, k: int, n: int, devices: int, itemsize: int, block_n: int,
                      latency: float = LATENCY) -> Budget:
    """all_gather(x) @ w with x (m, k) split by rows and w (k, n) by columns over `devices` chips."""
    n_shard, chunk = n // devices, m // devices
    compute = 2 * m * k * n_shard / chip.peak_flops
    floor = max(compute, (m * k + k * n_shard + m * n_shard) * itemsize / chip.hbm_bandwidth)
    edges = (k * block_n + m * block_n) * itemsize / chip.hbm_bandwidth
    step_compute = 2 * chunk * k * block_n / chip.peak_flops
    hop = chunk * k * itemsize / chip.ici_link_bandwidth
    hops = devices - 1
    handshakes = latency * (1 + max(0, hops - 1))  # the barrier, then a credit before every send but the first
    prologue = chunk * k * itemsize / chip.hbm_bandwidth  # x_j into the first chunk buffer
    alone = compute + edges + m * k * itemsize / chip.hbm_bandwidth + latency  # a ring of one: its own barrier
    overlapped = compute + edges + prologue + handshakes + hops * max(0.0, hop - step_compute)
    gathered_first = compute + edges + prologue + handshakes + hops * hop
    return Budget(floor=floor, compute=compute, step_compute=step_compute, hop=hop, edges=edges,
                  compute_alone=alone, overlapped=overlapped, gathered_first=gathered_first)
