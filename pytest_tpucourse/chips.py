"""Chips the course can predict for or measure on: names, figures, detection.

TPU figures come from JAX's own `pltpu.get_tpu_info_for_chip`, which describes one
TensorCore (called with 1 core; asked for 2 it repeats the per-core figures and
only changes `num_cores`, and it refuses 2 for v2, v3 and v7x). A chip's figures
are the per-core ones times its TensorCores. What a single JAX device gets is a
different question: v4 and v5p run both cores as one device (megacore), while on
v2, v3 and v7x every TensorCore is its own device. `Chip.per_device()` answers it;
a kernel timed on one device is judged against that.

Peak rates depend on the dtype (`Chip.peaks`): bf16 for every chip, and int8, fp8 or int4
where JAX's table gives a non-zero rate; a dtype a chip has no published rate for is
refused (`Chip.peak_for`), never quietly given the bf16 peak.

JAX has no ICI figures. The per-link one-way figures the course predicts with come from
"How to Scale Your Model" (jax-ml/scaling-book, part 2, "How to Think About TPUs"); Google
Cloud's TPU pages publish a bidirectional ICI bandwidth per chip (`ici_chip_bandwidth`).
For v5e, v5p and v6e the book's per-link figure times the ports times two directions is
exactly 90% of Google's per-chip figure (v5e: 4.5e10 x 4 x 2 = 3.6e11 against 4.0e11); the
book gives no reason. The course keeps the book's figures, which its chapters' worked
numbers use; a collective measured up to 10% faster than predicted is still consistent
with Google's. GPU figures are NVIDIA's datasheets (SXM parts, dense, no sparsity). Where
sources disagree the comment says so; docs/gates.md ("Sources that conflict") lists each.

This file is the one chip table: each built-in Chip carries every fact the package uses about
it (figures, JAX's version name, compile topology, scoped VMEM, device kinds, wraparound rule,
the slices the site's mesh offers), and no other module names a chip. Functions take a Chip;
names are turned into Chips once, where they come in (options, commands, the toolkit's faces).
More chips can be added without editing this file, through the
`pytest_tpucourse_register_chips` hook (see hookspecs.py): a Chip registered there is seen by
the run, its checks and the `tpucourse` commands alike (run/registered_chips.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

__all__ = [
    "builtin_chips", "Chip", "chip_for_device", "chip_for_run", "ChipMismatch", "ChipRegistry",
    "DEFAULT_CHIP", "dtype_family", "get_chip", "GOOGLE_ICI", "GPU_CHIPS", "jax_version_of",
    "JAX_TPU_INFO", "KNOWN_CHIPS", "SCALING_BOOK", "SCALING_BOOK_ICI", "SCALING_BOOK_NETWORKING",
    "SCOPED_VMEM_LIMITS", "TPU_CHIPS", "validate_chip", "Wraparound",
]


# The chip a run is for when nothing names one and no accelerator is detected: gate
# predictions, roofline markers, the VMEM budget, the TPU lowering and compile checks and
# every command without --chip use it.
DEFAULT_CHIP = "v5e"

JAX_TPU_INFO = "jax pltpu.get_tpu_info_for_chip (per TensorCore, x cores)"
SCALING_BOOK = "How to Scale Your Model (jax-ml/scaling-book), part 2, TPU table"
SCALING_BOOK_ICI = "How to Scale Your Model (jax-ml/scaling-book), part 2, interconnect table"
GOOGLE_ICI = "Google Cloud TPU docs, bidirectional inter-chip interconnect (ICI) bandwidth per chip"
SCALING_BOOK_NETWORKING = "How to Scale Your Model (jax-ml/scaling-book), part 2, \"TPU Networking\""

# The dtype families a peak rate is published for, as numpy spells the dtypes.
_DTYPE_FAMILY = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "int8": "int8",
                 "uint8": "int8", "int4": "int4", "uint4": "int4", "float32": "float32"}


def dtype_family(dtype) -> str:
    """'bfloat16', 'float16', 'int8', 'int4', 'float8' or 'float32' for a dtype; ValueError otherwise."""
    name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    name = name.strip().lower()
    if name.startswith("float8"):
        return "float8"
    if name not in _DTYPE_FAMILY:
        raise ValueError(f"unknown dtype {dtype!r}; the roofline knows bfloat16, float16, float8_*, "
                         f"int8, int4 and float32")
    return _DTYPE_FAMILY[name]


@dataclass(frozen=True)
class Wraparound:
    """Which axes of a slice of a chip have a wraparound link, as a source states it.

    The scaling book (part 2, "TPU Networking"): v4 and v5p slices get theirs from the
    optical switches, "only available on a full cube": "Any multiple of a full cube (e.g.
    4x4x4 or 4x4x8) will have wraparounds provided by the optical switches", while "a 2x2x4
    won't have any wraparounds"; v5e and v6e (one 16x16 2D torus, no optical switches) wrap
    "along any axis of size 16 (meaning an 8x16 has a wraparound on the long axis)". (A
    footnote of the same part, on bidirectional bandwidth, says training chips wrap on "an
    axis which is a multiple of 4"; the 2x2x4 example rules that reading out.) No source
    here states a rule for the other chips.
    """

    says: str  # the rule in words
    axis_of: int | None = None  # an axis of this many chips wraps around, a shorter one does not
    cube: int | None = None  # every axis wraps when a 3-D slice is whole cubes of this edge, none otherwise
    source: str = SCALING_BOOK_NETWORKING

    def axes(self, topology: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice with this topology (chips per axis) wrap around."""
        topology = tuple(topology)
        if self.cube is not None:
            cubes = len(topology) == 3 and all(size % self.cube == 0 for size in topology)
            return (cubes,) * len(topology)
        return tuple(size == self.axis_of for size in topology)


_AXIS_OF_16 = Wraparound("an axis of 16 chips wraps around, a shorter one does not", axis_of=16)
_WHOLE_CUBES = Wraparound("every axis wraps around when the slice is made of whole 4x4x4 cubes, none otherwise",
                          cube=4)


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
    peaks: dict = field(default_factory=dict, compare=False)  # dtype family -> FLOP/s per chip
    ici_chip_bandwidth: float | None = None  # bidirectional, bytes/s, per chip (Google's figure)
    compile_topology: str | None = None  # libtpu's compile-only topology ("v5e:2x2"): None, not compilable
    scoped_vmem_bytes: int | None = None  # the compiler's default scoped-VMEM limit, None where unread
    jax_version: str | None = None  # pltpu.ChipVersion's name ("v5e", "7x"): None, JAX has no figures for it
    wraparound: Wraparound | None = None  # which axes of a slice wrap around: None, no cited rule
    mesh_topologies: tuple[str, ...] = ()  # slices the site's mesh instrument offers ("4x4", "4x4x4")

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
        if not self.peaks:  # a chip registered with one figure: peak_flops is its bf16 rate
            object.__setattr__(self, "peaks", {"bfloat16": self.peak_flops})

    def peak_for(self, dtype) -> float:
        """FLOP/s for matmuls in this dtype; ValueError where no rate is published."""
        family = dtype_family(dtype)
        if family not in self.peaks:
            raise ValueError(f"{self.name}: no published {family} peak (known: {', '.join(self.peaks)}); "
                             f"the roofline cannot bound {family} compute on it")
        return self.peaks[family]

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
            cores=self.cores_per_device, peaks={k: v / n for k, v in self.peaks.items()},
        )


@dataclass(frozen=True)
class _Tpu:
    """What the course states about a built-in TPU beside JAX's figures (no JAX needed to read it)."""

    name: str
    jax_version: str  # pltpu.ChipVersion's spelling
    cores: int
    cores_per_device: int
    ici_links: int | None
    ici_link_bandwidth: float | None
    topology: str
    ici_source: str
    device_kinds: tuple[str, ...]  # jax Device.device_kind strings (as jax's own tpu_info maps them)
    compile_topology: str
    scoped_vmem_bytes: int | None = None
    ici_chip_bandwidth: float | None = None
    wraparound: Wraparound | None = None
    mesh_topologies: tuple[str, ...] = ()


# The built-in TPUs, one row each: the chip table.
#
# compile_topology: a compile-only topology, the smallest each chip accepts: "v5e:1x1" is
# refused ("not divisible by the default chips_per_host_bounds 2x2x1"); v7x is "tpu7x".
# scoped_vmem_bytes: the compiler's default scoped-VMEM limit, read off its E1001 errors
# ("Scoped allocation with size 28.00M and limit 16.00M") with libtpu 0.0.42.1: an f32
# ch11 matmul with 1024 blocks on 2048² arrays needs 28 MiB (v5e, v5p refuse it), with
# (1024, 2048, 1024) blocks on 4096² arrays 44 MiB (v6e, v7x refuse it). v2-v4 have
# 16 MiB of VMEM in all and refuse an oversized allocation without an E1001.
# `pltpu.CompilerParams(vmem_limit_bytes=...)` moves the limit.
_TPUS = (
    # v2: 2 cores, each its own device. Per-link ICI bandwidth not in the scaling book.
    _Tpu("v2", "v2", 2, 1, ici_links=4, ici_link_bandwidth=None, topology="2D torus",
         ici_source="Google Cloud TPU docs, system architecture (2D torus); per-link rate unpublished",
         device_kinds=("TPU v2",), compile_topology="v2:2x2"),
    # v3: 2 cores, each its own device. bf16: JAX 2 x 7e13 = 1.4e14 FLOP/s (the scaling
    # book agrees); Google's Cloud TPU v3 page says 123 TFLOPS per chip. HBM: JAX 2 x
    # 4.125e11 = 8.25e11 B/s; the scaling book and Google's page say 9.0e11. Both
    # conflicts: JAX's figures are used, as for every chip (docs/gates.md).
    _Tpu("v3", "v3", 2, 1, ici_links=4, ici_link_bandwidth=1e11, topology="2D torus",
         ici_source=SCALING_BOOK + ": v3 1e11 B/s one-way per link",
         device_kinds=("TPU v3",), compile_topology="v3:2x2"),
    # v4: megacore, both cores one device. HBM 2 x 6.15e11 = 1.23e12 (scaling book 1.2e12).
    _Tpu("v4", "v4", 2, 2, ici_links=6, ici_link_bandwidth=4.5e10, topology="3D torus",
         ici_source=SCALING_BOOK + ": v4p 4.5e10 B/s one-way per link, 3D torus",
         device_kinds=("TPU v4",), compile_topology="v4:2x2x1", wraparound=_WHOLE_CUBES,
         mesh_topologies=("4", "8", "2x2", "4x4", "4x4x4", "2x2x2")),
    # v5e: one core. HBM 8.20e11 B/s (JAX); Cloud docs say 819 GB/s, the scaling book
    # 8.1e11. JAX's figure reproduces the course's floors (add 4096^2 bf16: 122.8 us;
    # 819 GB/s gives 122.9 us).
    # Google: 400 GB/s bidirectional ICI per chip over 4 ports (the book: 90% of it).
    _Tpu("v5e", "v5e", 1, 1, ici_links=4, ici_link_bandwidth=4.5e10, topology="2D torus",
         ici_source=SCALING_BOOK + ": v5e 4.5e10 B/s one-way per link, 2D torus", ici_chip_bandwidth=4.0e11,
         device_kinds=("TPU v5e", "TPU v5 lite"), compile_topology="v5e:2x2", scoped_vmem_bytes=16 * 2 ** 20,
         wraparound=_AXIS_OF_16, mesh_topologies=("4", "8", "16", "2x2", "4x4", "4x8", "16x16")),
    # v5p: megacore. bf16 2 x 2.295e14 = 4.59e14 (agrees with the scaling book). HBM:
    # JAX 2 x 1.23e12 = 2.46e12 B/s; the scaling book says 2.8e12 and Cloud docs
    # 2765 GB/s (conflict; JAX's figure is used).
    # Google: 1200 GB/s bidirectional ICI per chip (6 links x 2 x 9e10 = 90% of it).
    _Tpu("v5p", "v5p", 2, 2, ici_links=6, ici_link_bandwidth=9e10, topology="3D torus",
         ici_source=SCALING_BOOK + ": v5p 9e10 B/s one-way per link, 3D torus", ici_chip_bandwidth=1.2e12,
         device_kinds=("TPU v5", "TPU v5p"), compile_topology="v5p:2x2x1", scoped_vmem_bytes=16 * 2 ** 20,
         wraparound=_WHOLE_CUBES, mesh_topologies=("4", "8", "2x2", "4x4", "4x4x4", "2x2x2")),
    # v6e: one core. bf16 9.2e14, HBM 1.64e12 (scaling book 1.6e12).
    # Google: 800 GB/s bidirectional ICI per chip over 4 ports (the book: 90% of it).
    _Tpu("v6e", "v6e", 1, 1, ici_links=4, ici_link_bandwidth=9e10, topology="2D torus",
         ici_source=SCALING_BOOK + ": v6e 9e10 B/s one-way per link, 2D torus", ici_chip_bandwidth=8.0e11,
         device_kinds=("TPU v6e", "TPU v6 lite"), compile_topology="v6e:2x2", scoped_vmem_bytes=32 * 2 ** 20,
         wraparound=_AXIS_OF_16, mesh_topologies=("4", "8", "16", "2x2", "4x4", "4x8", "16x16")),
    # v7x (Ironwood): 2 cores, each its own JAX device (JAX refuses 2 cores per device).
    # Per chip 2 x 1.155e15 = 2.31e15 bf16, 7.4e12 B/s. ICI: no per-link figure is
    # published. The scaling book's interconnect table (part 2) stops at v6e: it has no
    # TPU7x row. Google's TPU7x page gives 1200 GB/s bidirectional ICI per chip (v5p's
    # figure too) and no port count. So ici_link_bandwidth stays None, as for v2, and every
    # per-link model refuses v7x rather than carry v5p's 9e10 over by analogy.
    _Tpu("v7x", "7x", 2, 1, ici_links=None, ici_link_bandwidth=None, topology="3D torus",
         ici_source="no published per-link figure (not in the scaling book's interconnect "
         "table); 3D torus and 1200 GB/s per chip per Google Cloud TPU7x docs", ici_chip_bandwidth=1.2e12,
         device_kinds=("TPU7x",), compile_topology="tpu7x:2x2x1", scoped_vmem_bytes=32 * 2 ** 20),
)


def _tpu(row: _Tpu) -> Chip:
    from jax.experimental.pallas import tpu as pltpu

    core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(row.jax_version), 1)
    rates = {"bfloat16": core.bf16_ops_per_second, "int8": core.int8_ops_per_second,
             "float8": core.fp8_ops_per_second, "int4": core.int4_ops_per_second}
    cores = row.cores
    return Chip(
        name=row.name, kind="tpu",
        peak_flops=core.bf16_ops_per_second * cores,
        hbm_bandwidth=core.mem_bw_bytes_per_second * cores,
        hbm_bytes=core.hbm_capacity_bytes * cores,
        cores=cores, cores_per_device=row.cores_per_device,
        vmem_bytes=core.vmem_capacity_bytes,
        ici_links=row.ici_links, ici_link_bandwidth=row.ici_link_bandwidth, topology=row.topology,
        device_kinds=row.device_kinds,
        sources={"peak_flops": JAX_TPU_INFO, "hbm_bandwidth": JAX_TPU_INFO,
                 "hbm_bytes": JAX_TPU_INFO, "vmem_bytes": JAX_TPU_INFO, "ici": row.ici_source,
                 "mxu": JAX_TPU_INFO, "peaks": JAX_TPU_INFO + "; a rate of 0 there is unpublished",
                 **({"ici_chip_bandwidth": GOOGLE_ICI} if row.ici_chip_bandwidth else {}),
                 **({"wraparound": row.wraparound.source} if row.wraparound else {})},
        mxu_width=core.mxu_column_size, mxus=core.num_mxus,
        peaks={k: v * cores for k, v in rates.items() if v > 0}, ici_chip_bandwidth=row.ici_chip_bandwidth,
        compile_topology=row.compile_topology, scoped_vmem_bytes=row.scoped_vmem_bytes,
        jax_version=row.jax_version, wraparound=row.wraparound, mesh_topologies=row.mesh_topologies,
    )


def _builtin_gpus() -> list[Chip]:
    nvlink = "NVIDIA datasheet: NVLink, 25 GB/s one-way per link"
    a100 = "NVIDIA A100 datasheet (SXM)"
    a100_peaks = {"bfloat16": 312e12, "float16": 312e12, "int8": 624e12}
    hopper_peaks = {"bfloat16": 989.5e12, "float16": 989.5e12, "float8": 1979e12, "int8": 1979e12}
    return [
        # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: BF16/FP16 Tensor Core 312 TFLOPS
        # (624 with sparsity), INT8 624 TOPS dense, no FP8; HBM2e 2,039 GB/s, 80 GB; NVLink
        # 600 GB/s = 12 links. F32 is refused: TF32 tensor cores (156) or FP32 (19.5) depends
        # on the matmul precision.
        Chip("a100", "gpu", 312e12, 2.039e12, 80e9, ici_links=12, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node", peaks=a100_peaks,
             sources={"peak_flops": a100 + " 80GB", "hbm_bandwidth": a100 + " 80GB", "ici": nvlink,
                      "peaks": a100 + ", dense"}),
        # The A100 40GB SXM: the same compute, HBM2 1,555 GB/s and 40 GB. Its device kind says
        # "40GB"; read as the 80 GB part its memory floors would be 24% too low.
        Chip("a100-40gb", "gpu", 312e12, 1.555e12, 40e9, ici_links=12, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node", peaks=a100_peaks,
             sources={"peak_flops": a100 + " 40GB", "hbm_bandwidth": a100 + " 40GB", "ici": nvlink,
                      "peaks": a100 + ", dense"}),
        # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BF16 Tensor Core 1,979 TFLOPS
        # with sparsity, so 989.5 dense; FP8 and INT8 3,958 with sparsity, 1,979 dense; HBM3
        # 3.35 TB/s, 80 GB; NVLink 900 GB/s = 18 links.
        Chip("h100", "gpu", 989.5e12, 3.35e12, 80e9, ici_links=18, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node", peaks=hopper_peaks,
             sources={"peak_flops": "NVIDIA H100 datasheet (SXM), sparse/2", "hbm_bandwidth":
                      "NVIDIA H100 datasheet (SXM)", "ici": nvlink, "peaks": "NVIDIA H100 datasheet (SXM), sparse/2"}),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: the H100's compute (BF16 1,979 and
        # FP8/INT8 3,958 with sparsity); HBM3e 4.8 TB/s, 141 GB; NVLink 900 GB/s.
        Chip("h200", "gpu", 989.5e12, 4.8e12, 141e9, ici_links=18, ici_link_bandwidth=25e9,
             topology="NVLink/NVSwitch, all-to-all within a node", peaks=hopper_peaks,
             sources={"peak_flops": "NVIDIA H200 datasheet (SXM), sparse/2", "hbm_bandwidth":
                      "NVIDIA H200 datasheet (SXM)", "ici": nvlink, "peaks": "NVIDIA H200 datasheet (SXM), sparse/2"}),
    ]


TPU_CHIPS = tuple(row.name for row in _TPUS)
GPU_CHIPS = tuple(chip.name for chip in _builtin_gpus())
KNOWN_CHIPS = TPU_CHIPS + GPU_CHIPS
# The built-in chips' default scoped-VMEM limits by name, read off the table above (graded
# tests index it: tpu.SCOPED_VMEM_LIMITS).
SCOPED_VMEM_LIMITS = {row.name: row.scoped_vmem_bytes for row in _TPUS if row.scoped_vmem_bytes}


@functools.cache
def builtin_chips() -> dict[str, Chip]:
    return {c.name: c for c in [_tpu(row) for row in _TPUS] + _builtin_gpus()}


class ChipRegistry:
    """The built-in chips plus any a plugin or conftest registered. plugins_asked: the registry
    holds what the pytest_tpucourse_register_chips hook answered (False: the built-in chips only,
    as a command reading records has them)."""

    def __init__(self, extra=(), *, plugins_asked: bool = False):
        self._chips = dict(builtin_chips())
        self._registered: list[str] = []
        self.plugins_asked = plugins_asked
        for chip in extra:
            self.add(chip)

    def add(self, chip: Chip) -> None:
        if not isinstance(chip, Chip):
            raise TypeError(f"a registered chip must be a pytest_tpucourse.chips.Chip, got {chip!r}")
        name = chip.name.strip().lower()
        if name in self._chips:
            raise ValueError(f"chip {name!r} is registered twice")
        self._chips[name] = replace(chip, name=name, sources=chip.sources)
        self._registered.append(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._chips)

    @property
    def registered(self) -> tuple[str, ...]:
        """The names of the chips a plugin or conftest added (not built in)."""
        return tuple(self._registered)

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


def jax_version_of(chip: Chip) -> str | None:
    """The chip version JAX's TPU lowering rules take for `chip`: its own, or for a registered
    chip without one, the built-in TPU's whose compile topology is of the same family ("v5e:2x2":
    v5e's); None where neither is known."""
    if chip.jax_version is not None:
        return chip.jax_version
    family = (chip.compile_topology or "").split(":")[0]
    return next((row.jax_version for row in _TPUS if family and row.compile_topology.split(":")[0] == family),
                None)


def chip_for_device(platform: str, device_kind: str, registry: ChipRegistry | None = None) -> str | None:
    """Our name for the chip a JAX device is, or None (a CPU, or hardware we have no figures for).

    GPU figures are for SXM parts: a PCIe or NVL card has other clocks and bandwidth,
    so it is not recognised rather than mislabelled. An A100 whose kind says 40GB is the
    40 GB part (other HBM), never the 80 GB one.
    """
    for name in registry.registered if registry is not None else ():
        if device_kind.strip() in registry.get(name).device_kinds:
            return name
    if platform == "tpu":
        return next((row.name for row in _TPUS if device_kind.strip() in row.device_kinds), None)
    if platform in ("gpu", "cuda"):
        kind = device_kind.lower()
        if "pcie" in kind or "nvl" in kind:
            return None
        words = kind.replace("-", " ").split()
        for name in GPU_CHIPS:
            if name in words or f"nvidia {name}" in kind:
                return "a100-40gb" if name == "a100" and "40gb" in words else name
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
