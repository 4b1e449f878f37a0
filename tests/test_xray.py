"""The course's IR reader: HLO text, the x-ray's links, the stale-location trap, shipped dumps."""

import importlib.util
import re

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import chips
from pytest_tpucourse.commands import main
from pytest_tpucourse.readers import hlo_text
from pytest_tpucourse.instruments import xray
from pytest_tpucourse.core import jax_internals
from pytest_tpucourse.compiler import libtpu

from .support import REPO

DUMPS = REPO / "exercises" / "ch12" / "dumps"
needs_libtpu = pytest.mark.skipif(not libtpu.available(), reason=libtpu.INSTALL_LINE)

MODULE = """\
HloModule jit_f, is_scheduled=true

FileNames
1 "/src/f.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=6 end_line=6 column=8 end_column=13}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%add_region (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_dot (param_0: f32[4,8,32], param_1: f32[4,32,16]) -> f32[4,8,16] {
  %param_0 = f32[4,8,32]{2,1,0} parameter(0)
  %param_1 = f32[4,32,16]{2,1,0} parameter(1)
  ROOT %dot.1 = f32[4,8,16]{2,1,0} dot(%param_0, %param_1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, metadata={op_name="jit(f)/dot_general" stack_frame_id=1}
}

%body (p: (s32[], f32[4,8,16])) -> (s32[], f32[4,8,16]) {
  %p = (s32[], f32[4,8,16]{2,1,0}) parameter(0)
  %x = f32[4,8,16]{2,1,0} get-tuple-element(%p), index=1
  %ar = f32[4,8,16]{2,1,0} all-reduce-start(%x), replica_groups={{0,1}}, to_apply=%add_region
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], f32[4,8,16]{2,1,0}) tuple(%i, %ar)
}

%cond (q: (s32[], f32[4,8,16])) -> pred[] {
  %q = (s32[], f32[4,8,16]{2,1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main.1 (x.1: bf16[4,8,32], y.1: f32[4,32,16]) -> (s32[], /*index=1*/f32[4,8,16]) {
  %x.1 = bf16[4,8,32]{2,1,0:T(8,128)(2,1)} parameter(0)
  %y.1 = f32[4,32,16]{2,1,0} parameter(1)
  %cv = f32[4,8,32]{2,1,0} convert(bf16[4,8,32]{2,1,0:T(8,128)(2,1)} %x.1)
  %fusion.3 = f32[4,8,16]{2,1,0} fusion(%cv, %y.1), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(f)/dot_general" stack_frame_id=1}
  %k = f32[4,8,16]{2,1,0} custom-call(%fusion.3), custom_call_target="tpu_custom_call"
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,8,16]{2,1,0}) tuple(%zero, %k)
  ROOT %loop = (s32[], /*index=1*/f32[4,8,16]{2,1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
}
"""


def test_hlo_module_computations_instructions_and_locations():
    module = hlo_text.parse(MODULE)
    assert [c.name for c in module.computations] == ["add_region", "fused_dot", "body", "cond", "main.1"]
    assert module.entry.name == "main.1"
    fusion = module.entry.instruction("fusion.3")
    assert (fusion.opcode, fusion.operands, fusion.called, fusion.attribute("kind")) == (
        "fusion", ["cv", "y.1"], ["fused_dot"], "kLoop".replace("Loop", "Output"))
    assert module.entry.instruction("cv").operands == ["x.1"]  # an operand printed with its shape
    assert str(module.location(fusion)) == "/src/f.py:6:8"
    assert module.entry.instruction("loop").arrays == [("s32", ()), ("f32", (4, 8, 16))]
    assert {i.name for i in module.contained("body")} >= {"ar", "sum"}


def test_dot_numbers_of_a_dot_and_of_tpu_convolutions():
    module = hlo_text.parse(MODULE)
    dot = hlo_text.dot_numbers(module, module.computation("fused_dot").instruction("dot.1"))
    assert (dot["lhs_batch"], dot["rhs_batch"], dot["lhs_contracting"], dot["rhs_contracting"]) == ((0,), (0,), (2,), (1,))
    assert dot["out_labels"] == [("batch", 0), ("lhs", 0), ("rhs", 0)]
    tpu = hlo_text.parse(
        "ENTRY %e (a: bf16[128,4,256], b: bf16[4,384,256]) -> f32[4,128,384] {\n"
        "  %a = bf16[128,4,256]{2,1,0} parameter(0)\n  %b = bf16[4,384,256]{2,1,0} parameter(1)\n"
        "  ROOT %c = f32[4,128,384]{2,1,0} convolution(%a, %b), window={size=4 stride=3 lhs_dilate=4}, "
        "dim_labels=b0f_0oi->0bf\n}\n")
    conv = tpu.entry.instruction("c")
    numbers = hlo_text.dot_numbers(tpu, conv)
    assert (numbers["lhs_batch"], numbers["rhs_batch"], numbers["lhs_contracting"], numbers["rhs_contracting"]) == (
        (1,), (0,), (2,), (2,))
    assert numbers["out_labels"] == [("batch", 0), ("lhs", 0), ("rhs", 0)]
    assert hlo_text.convolution_window(conv) == {"size": (4,), "stride": (3,), "lhs_dilate": (4,)}


def test_summary_reads_entry_and_every_computation():
    summary = hlo_text.summary(hlo_text.parse(MODULE))
    assert summary == dict(
        kernels=[("cv", "convert"), ("fusion.3", "fusion"), ("k", "custom-call"), ("loop", "while")],
        fusions=[("fusion.3", "kOutput", "dot")],
        largest=("y.1", "f32[4,32,16]"),  # cv holds as many elements as x.1, in twice the bytes
        collectives=[("ar", "all-reduce-start")],
        custom_calls=[("k", "tpu_custom_call")],
        while_loops=[("loop", 3)],
    )


def test_an_instruction_without_its_metadata_and_backend_config_keeps_the_rest_whole():
    line = ('  %k = f32[8]{0:T(128)S(1)} custom-call(%x, %y), custom_call_target="tpu_custom_call", '
            'metadata={op_name="jit(f)/pallas_call" source_file="a, b.py"}, '
            'backend_config={"custom_call_config": {"body": "TUxSBGEs/w=="}, "x": [1, 2]}, sharding={replicated}')
    assert hlo_text.without_attributes(line, ("metadata", "backend_config", "frontend_attributes")) == (
        '  %k = f32[8]{0:T(128)S(1)} custom-call(%x, %y), custom_call_target="tpu_custom_call", sharding={replicated}')


def _module_from(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"{path.stem}_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def test_the_cache_returns_stale_locations_and_three_layers_does_not(tmp_path):
    """The trap, shown on this JAX: the same program compiled from another place keeps the old lines."""
    program = "import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.sin(x) * 2.0\n"
    old = _module_from(tmp_path, "old.py", program)
    new = _module_from(tmp_path, "new.py", "\n" * 5 + program)
    x = jnp.ones((8, 128), jnp.float32)

    def places(hlo):
        module = hlo_text.parse(hlo)
        return {(loc.file.rsplit("/", 1)[-1], loc.line) for loc in map(module.location, module.instructions()) if loc}

    flag = "jax_compilation_cache_include_metadata_in_key"
    before = getattr(jax.config, flag)
    jax.config.update(flag, False)
    try:
        with jax_internals.persistent_cache(tmp_path / "cache"):
            assert places(jax.jit(old).lower(x).compile().as_text()) == {("old.py", 5)}
            assert places(jax.jit(new).lower(x).compile().as_text()) == {("old.py", 5)}  # stale
            assert places(xray.three_layers(new, x).hlo) == {("new.py", 10)}
            assert getattr(jax.config, flag) is False
    finally:
        jax.config.update(flag, before)


def test_persistent_cache_puts_the_settings_back(tmp_path):
    names = ("jax_compilation_cache_dir", "jax_enable_compilation_cache")
    before = {n: getattr(jax.config, n) for n in names}
    with jax_internals.persistent_cache(tmp_path / "c"):
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    assert {n: getattr(jax.config, n) for n in names} == before


def _layer_program(x, w):
    h = jnp.dot(x, w)
    return jnp.tanh(h) * 2.0


def test_link_rows_of_a_small_program():
    layers = xray.three_layers(_layer_program, jnp.ones((8, 64)), jnp.ones((64, 32)))
    rows = {row["primitive"]: row for row in xray.xray(layers)}
    assert set(rows) == {"dot_general", "tanh", "mul"}
    assert rows["dot_general"]["stablehlo"] == ["stablehlo.dot_general"]
    assert rows["tanh"]["stablehlo"] == ["stablehlo.tanh"]
    assert rows["tanh"]["line"] == rows["mul"]["line"] == rows["dot_general"]["line"] + 1
    module = hlo_text.parse(layers.hlo)
    (dot_kernel,) = rows["dot_general"]["hlo"]
    assert module.entry.instruction(dot_kernel).opcode == "fusion"
    assert rows["tanh"]["hlo"] == rows["mul"]["hlo"] != rows["dot_general"]["hlo"]


def _loss_with_library_jits(logits, labels):
    p = jax.nn.log_softmax(logits)
    y = jax.nn.one_hot(labels, logits.shape[-1])
    return -(p * y).sum()


def test_a_library_jit_is_linked_through_its_call():
    """jax.nn.one_hot's body is a private function whose ops say only loc("eq"): its rows find
    them at the place of `call @_one_hot`, as the jaxpr puts them at the call's line."""
    layers = xray.three_layers(_loss_with_library_jits, jnp.ones((8, 10)), jnp.zeros((8,), jnp.int32))
    module = xray.stablehlo_module(layers.stablehlo)
    assert {f.name for f in module.functions} == {"main", "log_softmax", "_one_hot"}
    (call,) = [c for c in module.calls if c.callee == "_one_hot"]
    compare = next(op for op in module.ops if op.op == "stablehlo.compare")
    assert compare.function == "_one_hot" and compare.location is None and compare.places == [call.location]
    rows = xray.xray(layers)
    assert all(row["stablehlo"] and row["hlo"] for row in rows), rows
    eq = next(row for row in rows if row["primitive"] == "eq")
    assert "stablehlo.compare" in eq["stablehlo"] and eq["line"] == call.location.line


@needs_libtpu
def test_the_tpu_compiler_writes_matrix_products_as_convolutions():
    """What chapter 12 says of XLA:TPU's dots, against the installed libtpu, for a v5e: matrix
    products (batched too) become convolutions; a matrix-vector product a multiply and a reduce."""
    def opcodes(fn, *shapes):
        args = [jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in shapes]
        module = hlo_text.parse(libtpu.compile_for(fn, *args, chip=chips.get_chip("v5e")).optimized_hlo)
        return {i.opcode for i in module.instructions()}

    for product in (opcodes(jnp.matmul, (256, 512), (512, 384)),
                    opcodes(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b), (4, 256, 512), (4, 512, 128))):
        assert "convolution" in product and "dot" not in product
    matvec = opcodes(jnp.matmul, (512, 256), (256,))
    assert not {"convolution", "dot"} & matvec and {"multiply", "reduce"} <= matvec


@pytest.mark.parametrize("path", sorted(DUMPS.glob("v5e_*.hlo.txt")), ids=lambda p: p.name)
def test_shipped_dumps_say_who_compiled_them_and_point_at_this_checkout(path):
    dump = hlo_text.read_dump(path, REPO)
    assert re.match(r"XLA:TPU optimized HLO of programs\.\w+\(.*\), compiled ahead of time for TPU v5 lite "
                    r"\(topology v5e:2x2, (4 chips|\d of its chips)\) by libtpu [\d.]+ with jax [\d.]+ on a CPU host, "
                    r"\d{4}-\d\d-\d\d", dump.header), dump.header
    module = hlo_text.parse(dump.text)
    assert str(REPO / "exercises/ch12/dumps/programs.py") in module.file_names.values()
    assert all(name.startswith(f"{REPO}/") for name in module.file_names.values()), module.file_names


def test_the_mlp_block_dump_matches_the_current_program():
    """Every equation of programs.mlp_block finds its instructions in the v5e dump: if this fails,
    programs.py moved and the dumps must be captured again (bench/capture_tpu_dumps.py)."""
    spec = importlib.util.spec_from_file_location("programs", DUMPS / "programs.py")
    programs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(programs)
    args = [jnp.ones(shape, dtype) for shape, dtype in programs.ARGS["mlp_block"]]
    dump = hlo_text.read_dump(DUMPS / "v5e_mlp_block.hlo.txt", REPO)
    layers = xray.Layers(jax.make_jaxpr(programs.mlp_block)(*args),
                            xray.tpu_stablehlo(programs.mlp_block, *args), dump.text, dump.header)
    unmapped = [(r["primitive"], r["line"]) for r in xray.xray(layers) if not r["hlo"] or not r["stablehlo"]]
    assert not unmapped


def _dump_programs():
    spec = importlib.util.spec_from_file_location("programs", DUMPS / "programs.py")
    programs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(programs)
    return programs


@needs_libtpu
def test_tpu_layers_take_the_optimized_hlo_from_the_tpu_compiler():
    """programs.mlp_block compiled for a v5e in this run: every equation mapped, the pallas_call one
    tpu_custom_call, and the same kernels, fusions and custom calls as the shipped dump (names aside:
    the dump kept the arguments' names, jax.export does not)."""
    programs = _dump_programs()
    args = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in programs.ARGS["mlp_block"]]
    layers = xray.tpu_layers(programs.mlp_block, *args, chip="v5e")
    assert layers.compiler.startswith(f"XLA:TPU of libtpu {libtpu.libtpu_version()} with jax ")
    assert "TPU v5 lite device of topology v5e:2x2" in layers.compiler and "nothing ran" in layers.compiler
    rows = xray.xray(layers)
    assert all(row["hlo"] and row["stablehlo"] for row in rows), rows
    module = hlo_text.parse(layers.hlo)
    kernels = [name for row in rows if row["primitive"] == "pallas_call" for name in row["hlo"]]
    assert [module.entry.instruction(name).attribute("custom_call_target") for name in kernels] == ['"tpu_custom_call"']
    shipped = hlo_text.summary(hlo_text.parse(hlo_text.read_dump(DUMPS / "v5e_mlp_block.hlo.txt", REPO).text))
    now = hlo_text.summary(module)

    def without_names(summary):
        return ([opcode for _, opcode in summary["kernels"]], [kind[1:] for kind in summary["fusions"]],
                [target for _, target in summary["custom_calls"]], summary["largest"][1], summary["collectives"])

    assert without_names(now) == without_names(shipped)


@needs_libtpu
def test_xray_command_with_a_chip_reads_the_tpu_compilers_hlo(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "160")  # columns wide enough for the names below, on any terminal
    argv = ["xray", "exercises/ch12/dumps/programs.py:mlp_block", "--shapes", "256x512:bfloat16",
            "512x256:bfloat16", "1x256", "--color", "never", "--chip", "v5e"]
    assert main.main(argv) == 0
    out = capsys.readouterr().out
    assert f"optimized HLO: XLA:TPU of libtpu {libtpu.libtpu_version()}" in out and "topology v5e:2x2" in out
    assert re.search(r"programs\.py:31  return pl\.pallas_call\(\n\S+ = pallas_call .*custom-call \"tpu_custom", out), out
    assert main.main(argv[:-1] + ["v9"]) == 2
    assert "did not trace, lower and compile for a v9 with the real TPU compiler" in capsys.readouterr().err


def test_xray_command_with_a_chip_without_the_compiler_says_how_to_install(capsys, monkeypatch):
    monkeypatch.setattr(libtpu, "_available", False)
    assert main.main(["xray", "tests/fixtures/xray_program.py:layer", "--shapes", "8x64", "--chip", "v5e"]) == 2
    assert libtpu.INSTALL_LINE in capsys.readouterr().err


def test_xray_command_prints_three_columns_by_source_line(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # columns wide enough for the names below, on any terminal
    program = REPO / "tests" / "fixtures" / "xray_program.py"
    assert main.main(["xray", f"{program}:layer", "--shapes", "8x64", "64x32", "32", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "optimized HLO: XLA for cpu" in out and "\033[" not in out
    assert re.search(r"xray_program\.py:8  h = jnp\.dot\(x, w\)\n\S+ = dot_general a b\s+%0 = stablehlo\.dot_general", out)
    assert main.main(["xray", f"{program}:layer", "--shapes", "8x64", "64x32", "32", "--color", "always"]) == 0
    assert "\033[36m" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["xray", "nowhere.py:f"], "nowhere.py does not exist"),
    (["xray", "tests/fixtures/xray_program.py:missing"], "has no function missing()"),
    (["xray", "tests/fixtures/xray_program.py:layer", "--shapes", "8xq"], "--shapes: cannot read '8xq'"),
])
def test_xray_command_errors_name_the_problem(capsys, monkeypatch, argv, message):
    monkeypatch.chdir(REPO)
    assert main.main(argv) == 2
    assert message in capsys.readouterr().err
