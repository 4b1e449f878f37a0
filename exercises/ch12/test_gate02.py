"""Gate 02, the IR stack. Run: pytest --gates --chip=v5e exercises/ch12

ir-mapped (the project's criterion; the course states none for this gate): your x-ray,
dot decoder and narration agree with the course's reader on the chip's own compilation
of programs.mlp_block (an XLA matmul, a Pallas kernel, a fused softmax), and its
pallas_call is one tpu_custom_call. On a TPU the program is compiled in the run and the
row is measured on that chip. Elsewhere the row is off-chip-verified, never a pass: with
the tpu-compile extra the program is compiled in the run, ahead of time for a v5e by the
real TPU compiler (libtpu); without it the optimized HLO is dumps/v5e_mlp_block.hlo.txt,
compiled the same way earlier (its first line says by what and when). The row's notes
say which compiler produced the HLO.
"""

import importlib.util
from pathlib import Path

import jax
import pytest

from pytest_tpucourse import ir, tpu
from pytest_tpucourse.instruments import xray
from pytest_tpucourse import strategies as tst

COURSE_ROOT = Path(__file__).resolve().parents[2]
DUMPS = COURSE_ROOT / "exercises" / "ch12" / "dumps"


def _programs():
    spec = importlib.util.spec_from_file_location("ch12_dump_programs", DUMPS / "programs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chip_layers(program, args) -> xray.Layers:
    """The program's three layers from the TPU's compilation: this chip's, a v5e compile ahead of
    time in this run (the tpu-compile extra), or the shipped v5e dump."""
    jaxpr = jax.make_jaxpr(program)(*args)
    if jax.default_backend() == "tpu":
        with ir.current_locations():
            lowered = jax.jit(program).lower(*args)
            return xray.Layers(jaxpr, lowered.as_text(debug_info=True), lowered.compile().as_text(),
                                  f"XLA:TPU on {jax.devices()[0].device_kind}, compiled in this run")
    if tpu.available():
        return xray.tpu_layers(program, *args, chip="v5e")
    dump = ir.read_dump(DUMPS / "v5e_mlp_block.hlo.txt", COURSE_ROOT)
    return xray.Layers(jaxpr, xray.tpu_stablehlo(program, *args), dump.text, dump.header)


@pytest.mark.gate(2)
def test_ir_mapped_on_the_chips_compilation(gate_run, impl):
    programs = _programs()
    shapes = [shape for shape, _ in programs.ARGS["mlp_block"]]
    args = [tst.random_array(shape, dtype, seed) for seed, (shape, dtype) in enumerate(programs.ARGS["mlp_block"])]
    layers = _chip_layers(programs.mlp_block, args)
    module = ir.parse(layers.hlo)

    def check():
        rows = impl.xray.xray(layers.jaxpr, layers.stablehlo, layers.hlo)
        ir.assert_rows_match(impl.xray.xray, rows, xray.xray(layers), program="programs.mlp_block")
        kernels = [name for row in rows if row["primitive"] == "pallas_call" for name in row["hlo"]]
        assert [module.entry.instruction(n).attribute("custom_call_target") for n in kernels] == [
            '"tpu_custom_call"'], f"the pallas_call should be one tpu_custom_call, the x-ray says {kernels}"
        ir.assert_summary_matches(impl.narrate.narrate, impl.narrate.narrate(layers.hlo),
                                         ir.summary(module), dump="programs.mlp_block")
        ir.assert_dots_match(impl.hlo_dots.decode_hlo_dots, impl.hlo_dots.decode_hlo_dots(layers.hlo),
                                    [ir.dot_numbers(module, i) for i in ir.dots(module)],
                                    dump="programs.mlp_block")

    gate_run.verify("ir-mapped", "mlp_block", shapes, "bfloat16", check, notes=f"on {layers.compiler}"[:300])
