"""The chip registry: figures from JAX per TensorCore, scaled per chip; detection; the hook."""

import pytest

from pytest_tpucourse import chips
from pytest_tpucourse.chips import Chip, ChipMismatch, ChipRegistry


def test_per_chip_figures_are_jax_per_core_figures_times_cores():
    from jax.experimental.pallas import tpu as pltpu

    for name, version in zip(chips.TPU_CHIPS, ("v2", "v3", "v4", "v5e", "v5p", "v6e", "7x")):
        core = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(version), 1)
        chip = chips.get_chip(name)
        assert chip.peak_flops == core.bf16_ops_per_second * chip.cores
        assert chip.hbm_bandwidth == core.mem_bw_bytes_per_second * chip.cores


@pytest.mark.parametrize("name, cores, peak", [
    ("v2", 2, 4.6e13), ("v3", 2, 1.4e14), ("v4", 2, 2.75e14), ("v5e", 1, 1.97e14),
    ("v5p", 2, 4.59e14), ("v6e", 1, 9.2e14), ("v7x", 2, 2.31e15),
])
def test_dual_core_chips_count_both_cores(name, cores, peak):
    chip = chips.get_chip(name)
    assert chip.cores == cores
    assert chip.peak_flops == pytest.approx(peak)


def test_jax_repeats_per_core_figures_when_asked_for_two_cores():
    """Why the registry multiplies: num_cores=2 does not double the rates."""
    from jax.experimental.pallas import tpu as pltpu

    one = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion.TPU_V4, 1)
    two = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion.TPU_V4, 2)
    assert two.bf16_ops_per_second == one.bf16_ops_per_second


@pytest.mark.parametrize("name, per_device_peak", [("v4", 2.75e14), ("v5p", 4.59e14), ("v7x", 1.155e15), ("v3", 7e13)])
def test_per_device_figures(name, per_device_peak):
    """Megacore chips (v4, v5p) are one device; v2, v3, v7x expose each core as a device."""
    assert chips.get_chip(name).per_device().peak_flops == pytest.approx(per_device_peak)


def test_v5e_figures_and_ridge():
    v5e = chips.get_chip("v5e")
    assert (v5e.peak_flops, v5e.hbm_bandwidth) == (1.97e14, 8.2e11)
    assert v5e.ridge == pytest.approx(240.24, abs=0.01)
    assert (v5e.ici_links, v5e.ici_link_bandwidth, v5e.topology) == (4, 4.5e10, "2D torus")


def test_every_builtin_chip_cites_its_sources():
    for chip in chips.builtin_chips().values():
        assert {"peak_flops", "hbm_bandwidth", "ici"} <= set(chip.sources), chip.name


def test_gpus():
    h200 = chips.get_chip("h200")
    assert (h200.kind, h200.peak_flops, h200.hbm_bandwidth, h200.hbm_bytes) == ("gpu", 989.5e12, 4.8e12, 141e9)


@pytest.mark.parametrize("platform, kind, expected", [
    ("tpu", "TPU v5 lite", "v5e"), ("tpu", "TPU v5e", "v5e"), ("tpu", "TPU v5", "v5p"),
    ("tpu", "TPU v6 lite", "v6e"), ("tpu", "TPU7x", "v7x"), ("tpu", "TPU v4", "v4"),
    ("gpu", "NVIDIA H200", "h200"), ("gpu", "NVIDIA H100 80GB HBM3", "h100"),
    ("gpu", "NVIDIA A100-SXM4-80GB", "a100"), ("gpu", "NVIDIA H100 PCIe", None),
    ("gpu", "NVIDIA H100 NVL", None), ("gpu", "NVIDIA GeForce RTX 4090", None),
    ("tpu", "TPU v9 imaginary", None), ("cpu", "cpu", None),
])
def test_detection(platform, kind, expected):
    assert chips.chip_for_device(platform, kind) == expected


def test_chip_for_run_on_cpu_is_the_requested_chip():
    assert chips.chip_for_run("v6e", "cpu", "cpu") == "v6e"
    assert chips.chip_for_run(None, "cpu", "cpu") is None


def test_chip_for_run_on_hardware_must_match():
    assert chips.chip_for_run(None, "tpu", "TPU v5 lite") == "v5e"
    assert chips.chip_for_run("v5e", "tpu", "TPU v5 lite") == "v5e"
    with pytest.raises(ChipMismatch, match=r"--chip v5p but this run executes on 'TPU v5 lite' \(v5e\)"):
        chips.chip_for_run("v5p", "tpu", "TPU v5 lite")
    with pytest.raises(ChipMismatch, match="not a known chip"):
        chips.chip_for_run(None, "gpu", "NVIDIA GeForce RTX 4090")


def test_registry_accepts_extra_chips_and_detects_them():
    extra = Chip("MyChip", "tpu", 1e14, 1e12, 16e9, device_kinds=("TPU my chip",))
    registry = ChipRegistry([extra])
    assert "mychip" in registry.names
    assert registry.get("mychip").ridge == 100
    assert chips.chip_for_run(None, "tpu", "TPU my chip", registry) == "mychip"
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(Chip("v5e", "tpu", 1e14, 1e12, 16e9))
    with pytest.raises(TypeError, match="must be a pytest_tpucourse.chips.Chip"):
        registry.add({"name": "x"})


@pytest.mark.parametrize("kwargs, message", [
    (dict(peak_flops=0), "peak_flops must be a positive number"),
    (dict(hbm_bandwidth=-1), "hbm_bandwidth must be a positive number"),
    (dict(cores=2, cores_per_device=3), "must divide"),
])
def test_bad_chip_figures_are_rejected(kwargs, message):
    base = dict(name="x", kind="tpu", peak_flops=1e14, hbm_bandwidth=1e12, hbm_bytes=1e9)
    with pytest.raises(ValueError, match=message):
        Chip(**{**base, **kwargs})


def test_validate_chip():
    assert chips.validate_chip(" TPU-v5e ") == "v5e"
    assert chips.validate_chip("mychip", ["mychip"]) == "mychip"
    with pytest.raises(ValueError, match="unknown chip 'v9z'; known chips: v2, v3"):
        chips.validate_chip("v9z")



def test_jax_refuses_two_cores_for_chips_without_megacore():
    """Why the registry asks for one core and multiplies (docs/gates.md, "Sources that conflict")."""
    from jax.experimental.pallas import tpu as pltpu

    for version in ("v2", "v3", "v5e", "v6e", "7x"):
        with pytest.raises(ValueError, match="num_tensor_cores_per_logical_device=1"):
            pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(version), 2)


def test_mxu_width_and_count_come_from_jax():
    """128-wide MXUs up to v5p, 256 from v6e (pltpu.get_tpu_info_for_chip's mxu_column_size)."""
    widths = {name: (chips.get_chip(name).mxu_width, chips.get_chip(name).mxus) for name in chips.TPU_CHIPS}
    assert widths == {"v2": (128, 1), "v3": (128, 2), "v4": (128, 4), "v5e": (128, 4), "v5p": (128, 4),
                      "v6e": (256, 2), "v7x": (256, 2)}
    assert chips.get_chip("h100").mxu_width is None


def test_v7x_has_no_per_link_figure_because_none_is_published():
    """The scaling book's interconnect table has no TPU7x row; Google gives a per-chip total only."""
    v7x = chips.get_chip("v7x")
    assert v7x.ici_link_bandwidth is None and "no published per-link figure" in v7x.sources["ici"]
    assert v7x.ici_chip_bandwidth == 1.2e12


# ---------------------------------------------------------------- one chip table

def _chip_name_pattern():
    """A TPU chip as the package could spell it: a course name, JAX's version, a topology's family,
    a device kind (v5e, 7x, tpu7x, TPU v5 lite)."""
    import re

    spellings = set()
    for chip in chips.builtin_chips().values():
        if chip.kind == "tpu":
            spellings |= {chip.name, chip.jax_version, chip.compile_topology.split(":")[0], *chip.device_kinds}
    spellings.discard(None)
    alternatives = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
    return re.compile(rf"(?<![\w.])(?:{alternatives})(?![\w])", re.I)


def chip_name_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in a module's source that names a TPU chip: docstrings
    and help= text of a command's arguments aside."""
    import ast

    tree = ast.parse(source)
    aside = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            aside.add(id(body[0].value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            aside |= {id(inner) for inner in ast.walk(node.value)}
    pattern = _chip_name_pattern()
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in aside
            and pattern.search(node.value)]


def test_no_tpu_chip_is_named_outside_the_chip_table():
    """Every fact about a chip lives in chips.py: elsewhere the package names none."""
    from .support import REPO

    package = REPO / "pytest_tpucourse"
    found = [f"{path.relative_to(REPO)}:{line}: {text[:60]!r}" for path in sorted(package.rglob("*.py"))
             if path != package / "chips.py"
             for line, text in chip_name_literals(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_chip_name_check_sees_a_literal_but_not_a_docstring_or_help():
    source = ('"""Compiles for v5e."""\n'
              'def f(parser):\n    """On a v6e."""\n'
              '    parser.add_argument("--chip", help="v5e, v6e, ...")\n'
              '    return {"v5p": 1, "tpu": "TPU v5 lite"}, f"compiled for tpu7x {parser}"\n')
    assert [line for line, _ in chip_name_literals(source)] == [5, 5, 5]


def chip_parameters(source: str) -> list[tuple[str, str]]:
    """(function, annotation) of each parameter named chip or run_chip in a module's source."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                if arg.arg in ("chip", "run_chip"):
                    found.append((node.name, ast.unparse(arg.annotation) if arg.annotation else ""))
    return found


def test_every_chip_parameter_is_a_chip():
    """A function takes a Chip, never a name: names become Chips once, where they come in. Beside a
    Chip, a name is taken only by the toolkit's public functions, which graded tests call with
    "v5e" (they resolve it through the run's registry, grading/context.py), and by instruments/."""
    import re

    from pytest_tpucourse import ir, tpu

    from .support import REPO

    public = set(tpu.__all__) | set(ir.__all__)
    package = REPO / "pytest_tpucourse"
    wrong = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        for function, annotation in chip_parameters(path.read_text(encoding="utf-8")):
            names = re.search(r"\bstr\b", annotation) is not None
            if "Chip" not in annotation or (names and not (function in public or relative.startswith("instruments/")
                                                           or relative == "grading/context.py")):
                wrong.append(f"{relative}: {function}(chip: {annotation or 'no annotation'})")
    assert wrong == []


def test_the_chip_parameter_check_sees_a_name():
    assert chip_parameters("def f(chip: str, *, run_chip=None):\n    pass\n") == [("f", "str"), ("f", "")]
