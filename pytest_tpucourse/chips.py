"""Chips the course can predict for or measure on: names, figures, detection.

TPU figures come from JAX's own `pltpu.get_tpu_info_for_chip`, which describes one
TensorCore (called with 1 core; asked for 2 it repeats the per-core figures and
only changes `num_cores`, and it refuses 2 for v2, v3 and v7x). A chip's figures
are the per-core ones times its TensorCores. What a single JAX device gets is a
different question: v4 and v5p run both cores as one device (megacore), while on
v2, v3 and v7x every TensorCore is its own device. `Chip.per_device()` answers it;
a kernel timed on one device is judged against that.

JAX has no ICI figures; they come from "How to Scale Your Model" (jax-ml/scaling-book,
part 2, "How to Think About TPUs"). GPU figures are NVIDIA's datasheets (SXM parts,
dense bf16, no sparsity). Where sources disagree the comment says so.

More chips can be added without editing this file, through the
`pytest_tpucourse_register_chips` hook (see hookspecs.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

TPU_CHIPS = ("v2", "v3", "v4", "v5e", "v5p", "v6e", "v7x")
GPU_CHIPS = ("a100", "h100", "h200")
KNOWN_CHIPS = TPU_CHIPS + GPU_CHIPS
# The chip a run is for when nothing names one and no accelerator is detected: gate
# predictions, roofline markers, the VMEM budget and the TPU lowering check all use it.
DEFAULT_CHIP = "v5e"
# Our TPU names as JAX's pltpu.ChipVersion spells them.
JAX_CHIP_VERSIONS = {"v2": "v2", "v3": "v3", "v4": "v4", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e",
                     "v7x": "7x"}

JAX_TPU_INFO = "jax pltpu.get_tpu_info_for_chip (per TensorCore, x cores)"
SCALING_BOOK = "How to Scale Your Model (jax-ml/scaling-book), part 2, TPU table"
SCALING_BOOK_ICI = "How to Scale Your Model (jax-ml/scaling-book), part 2, interconnect table"


@dataclass(frozen=True)
class Chip:
    """One accelerator chip. Rates are per chip: FLOP/s (dense bf16) and bytes/s."""

    name: str
    kind: str  # "tpu" or "gpu"
    peak_flops: float
    hbm_bandwidth: float
    hbm_bytes: float
    cores: int = 1  # TensorCores per chip (GPUs: 1)
    cores_per_device: int = 1  # TensorCores one JAX device drives
    vmem_bytes: int | None = None  # per TensorCore
    ici_links: int | None = None
    ici_link_bandwidth: float | None = None  # one-way, bytes/s, per link
    topology: str | None = None
    device_kinds: tuple[str, ...] = ()  # jax device_kind strings that are this chip
    sources: dict = field(default_factory=dict, compare=False)
    mxu_width: int | None = None  # an MXU is mxu_width x mxu_width (TPU: 128 up to v5p, 256 from v6e)
    mxus: int | None = None  # MXUs per TensorCore

    def __post_init__(self):
        for what in ("peak_flops", "hbm_bandwidth"):
            value = getattr(self, what)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"chip {self.name!r}: {what} must be a positive number, got {value!r}")
        if self.cores < 1 or self.cores_per_device < 1 or self.cores % self.cores_per_device:
            raise ValueError(
                f"chip {self.name!r}: cores_per_device ({self.cores_per_device}) must divide "
                f"cores ({self.cores})"
            )

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and HBM take equally long."""
        return self.peak_flops / self.hbm_bandwidth

    @property
    def devices_per_chip(self) -> int:
        return self.cores // self.cores_per_device

    def per_device(self) -> Chip:
        """The figures one JAX device gets (the whole chip unless cores are separate devices)."""
        n = self.devices_per_chip
        if n == 1:
            return self
        return replace(
            self, name=f"{self.name} (one of {n} devices)", peak_flops=self.peak_flops / n,
            hbm_bandwidth=self.hbm_bandwidth / n, hbm_bytes=self.hbm_bytes / n,
            cores=self.cores_per_device,
        )


def _tpu(name: str, cores: int, cores_per_device: int, *, ici_links, ici_link_bandwidth,
         topology: str, ici_source: str) -> Chip:
    from jax.experimental.pallas import tpu as pltpu

    core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(JAX_CHIP_VERSIONS[name]), 1)
    return Chip(
        name=name, kind="tpu",
        peak_flops=core.bf16_ops_per_second * cores,
        hbm_bandwidth=core.mem_bw_bytes_per_second * cores,
        hbm_bytes=core.hbm_capacity_bytes * cores,
        cores=cores, cores_per_device=cores_per_device,
        vmem_bytes=core.vmem_capacity_bytes,
        ici_links=ici_links, ici_link_bandwidth=ici_link_bandwidth, topology=topology,
        sources={"peak_flops": JAX_TPU_INFO, "hbm_bandwidth": JAX_TPU_INFO,
                 "hbm_bytes": JAX_TPU_INFO, "vmem_bytes": JAX_TPU_INFO, "ici": ici_source,
                 "mxu": JAX_TPU_INFO},
        mxu_width=core.mxu_column_size, mxus=core.num_mxus,
    )


def _builtin_tpus() -> list[Chip]:
    return [
        # v2: 2 cores, each its own device. Per-link ICI bandwidth not in the scaling book.
        _tpu("v2", 2, 1, ici_links=4, ici_link_bandwidth=None, topology="2D torus",
             ici_source="Google Cloud TPU docs, system architecture (2D torus); per-link rate unpublished"),
        # v3: 2 cores, each its own device. HBM: JAX 2 x 4.125e11 = 8.25e11 B/s; the
        # scaling book says 9.0e11 (conflict; JAX's figure is used).
        _tpu("v3", 2, 1, ici_links=4, ici_link_bandwidth=1e11, topology="2D torus",
             ici_source=SCALING_BOOK + ": v3 1e11 B/s one-way per link"),
        # v4: megacore, both cores one device. HBM 2 x 6.15e11 = 1.23e12 (scaling book 1.2e12).
        _tpu("v4", 2, 2, ici_links=6, ici_link_bandwidth=4.5e10, topology="3D torus",
             ici_source=SCALING_BOOK + ": v4p 4.5e10 B/s one-way per link, 3D torus"),
        # v5e: one core. HBM 8.20e11 B/s (JAX); Cloud docs say 819 GB/s, the scaling book
        # 8.1e11. JAX's figure reproduces the course's floors (add 4096^2 bf16: 122.8 us;
        # 819 GB/s gives 122.9 us).
        _tpu("v5e", 1, 1, ici_links=4, ici_link_bandwidth=4.5e10, topology="2D torus",
             ici_source=SCALING_BOOK + ": v5e 4.5e10 B/s one-way per link, 2D torus"),
        # v5p: megacore. bf16 2 x 2.295e14 = 4.59e14 (agrees with the scaling book). HBM:
        # JAX 2 x 1.23e12 = 2.46e12 B/s; the scaling book says 2.8e12 and Cloud docs
        # 2765 GB/s (conflict; JAX's figure is used).
        _tpu("v5p", 2, 2, ici_links=6, ici_link_bandwidth=9e10, topology="3D torus",
             ici_source=SCALING_BOOK + ": v5p 9e10 B/s one-way per link, 3D torus"),
        # v6e: one core. bf16 9.2e14, HBM 1.64e12 (scaling book 1.6e12).
        _tpu("v6e", 1, 1, ici_links=4, ici_link_bandwidth=9e10, topology="2D torus",
             ici_source=SCALING_BOOK + ": v6e 9e10 B/s one-way per link, 2D torus"),
        # v7x (Ironwood): 2 cores, each its own JAX device (JAX refuses 2 cores per device).
        # Per chip 2 x 1.155e15 = 2.31e15 bf16, 7.4e12 B/s. ICI: the scaling book's
        # interconnect table lists TPU7x at 9.0e10 B/s one-way per link (1.8e11 bidi).
        _tpu("v7x", 2, 1, ici_links=None, ici_link_bandwidth=9e10, topology="3D torus",
             ici_source=SCALING_BOOK_ICI + ": TPU7x 9.0e10 B/s one-way per link; 3D torus per "
             "Google Cloud TPU7x docs"),
    ]


def _builtin_gpus() -> list[Chip]:
    nvlink = "NVIDIA datasheet: NVLink, 25 GB/s one-way per link"
    return [
        # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: BF16 Tensor Core 312 TFLOPS
        # (624 with sparsity), HBM2e 2,039 GB/s, 80 GB; NVLink 600 GB/s = 12 links.
        Chip("a100", "gpu", 312e12, 2.039e12, 80e9, ici_links=12, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node",
             sources={"peak_flops": "NVIDIA A100 datasheet (SXM 80GB)", "hbm_bandwidth":
                      "NVIDIA A100 datasheet (SXM 80GB)", "ici": nvlink}),
        # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 Tensor Core 1,979 TFLOPS
        # with sparsity, so 989.5 dense; HBM3 3.35 TB/s, 80 GB; NVLink 900 GB/s = 18 links.
        Chip("h100", "gpu", 989.5e12, 3.35e12, 80e9, ici_links=18, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node",
             sources={"peak_flops": "NVIDIA H100 datasheet (SXM), sparse/2", "hbm_bandwidth":
                      "NVIDIA H100 datasheet (SXM)", "ici": nvlink}),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 1,979 TFLOPS with sparsity
        # (989.5 dense, the same die as H100); HBM3e 4.8 TB/s, 141 GB; NVLink 900 GB/s.
        Chip("h200", "gpu", 989.5e12, 4.8e12, 141e9, ici_links=18, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node",
             sources={"peak_flops": "NVIDIA H200 datasheet (SXM), sparse/2", "hbm_bandwidth":
                      "NVIDIA H200 datasheet (SXM)", "ici": nvlink}),
    ]


@functools.cache
def builtin_chips() -> dict[str, Chip]:
    return {c.name: c for c in _builtin_tpus() + _builtin_gpus()}


class ChipRegistry:
    """The built-in chips plus any a plugin or conftest registered."""

    def __init__(self, extra=()):
        self._chips = dict(builtin_chips())
        for chip in extra:
            self.add(chip)

    def add(self, chip: Chip) -> None:
        if not isinstance(chip, Chip):
            raise TypeError(f"a registered chip must be a pytest_tpucourse.chips.Chip, got {chip!r}")
        name = chip.name.strip().lower()
        if name in self._chips:
            raise ValueError(f"chip {name!r} is registered twice")
        self._chips[name] = replace(chip, name=name, sources=chip.sources)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._chips)

    def get(self, name: str) -> Chip:
        return self._chips[validate_chip(name, self.names)]


def validate_chip(name: str, known=None) -> str:
    """Normalise a chip name or raise ValueError naming the known ones."""
    known = tuple(known) if known is not None else KNOWN_CHIPS
    normalised = name.strip().lower()
    if normalised.startswith("tpu"):
        normalised = normalised[3:].lstrip("-_ ")
    if normalised not in known:
        raise ValueError(f"unknown chip {name!r}; known chips: {', '.join(known)}")
    return normalised


def get_chip(name: str) -> Chip:
    """A built-in chip by name."""
    return builtin_chips()[validate_chip(name)]


# jax Device.device_kind strings (as jax's own tpu_info maps them) -> our names.
_TPU_DEVICE_KINDS = {
    "TPU v2": "v2", "TPU v3": "v3", "TPU v4": "v4",
    "TPU v5e": "v5e", "TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v5p": "v5p",
    "TPU v6e": "v6e", "TPU v6 lite": "v6e", "TPU7x": "v7x",
}


def chip_for_device(platform: str, device_kind: str, registry: ChipRegistry | None = None) -> str | None:
    """Our name for the chip a JAX device is, or None (a CPU, or hardware we have no figures for).

    GPU figures are for SXM parts: a PCIe or NVL card has other clocks and bandwidth,
    so it is not recognised rather than mislabelled.
    """
    for name in registry.names if registry is not None else ():
        if device_kind.strip() in registry.get(name).device_kinds:
            return name
    if platform == "tpu":
        return _TPU_DEVICE_KINDS.get(device_kind.strip())
    if platform in ("gpu", "cuda"):
        kind = device_kind.lower()
        if "pcie" in kind or "nvl" in kind:
            return None
        for name in GPU_CHIPS:
            if name in kind.replace("-", " ").split() or f"nvidia {name}" in kind:
                return name
    return None


class ChipMismatch(ValueError):
    """--chip names a different chip from the one this run executes on."""


def chip_for_run(requested: str | None, platform: str, device_kind: str,
                 registry: ChipRegistry | None = None) -> str | None:
    """The chip this run's predictions and records are for.

    On a CPU it is whatever was asked for (predictions only). On an accelerator it is
    the detected chip; asking for another one is an error, never a mislabelled record.
    """
    if platform == "cpu":
        return requested
    detected = chip_for_device(platform, device_kind, registry)
    if detected is None:
        raise ChipMismatch(
            f"this run executes on {platform} device {device_kind!r}, which is not a known chip; "
            f"register it with the pytest_tpucourse_register_chips hook"
        )
    if requested is not None and requested != detected:
        raise ChipMismatch(
            f"--chip {requested} but this run executes on {device_kind!r} ({detected}); "
            f"measurements here are for {detected}: pass --chip {detected} or leave it out"
        )
    return detected
