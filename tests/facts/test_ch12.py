"""Chapter 12 (the IR stack): where each layer keeps its source locations, what XLA:CPU and XLA:TPU do
to a program's dots, names and buffers, read off the installed toolchain. docs/facts.md lists each
claim beside its test (some are tests/test_xray.py's)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax._src import source_info_util

from pytest_tpucourse.readers import hlo_text

from .toolchain import compiler, for_this_jax

REPO = Path(__file__).resolve().parents[2]
DUMPS = REPO / "exercises/ch12/dumps"

PROBE = '''import jax
import jax.numpy as jnp


def f(x, w, b, g, beta):            # line 5 of probe.py
    h = x @ w                        # line 6
    h = h + b                        # line 7
    h = jax.nn.gelu(h)               # line 8
    m = h.mean(-1, keepdims=True)
    c = h - m
    v = (c * c).mean(-1, keepdims=True)
    return (h - m) * jax.lax.rsqrt(v) * g + beta  # line 12


def scaled(x):
    return x / 8.0 + jax.lax.stop_gradient(x)  # line 16
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    path = tmp_path_factory.mktemp("ch12") / "probe.py"
    path.write_text(PROBE)
    spec = importlib.util.spec_from_file_location("probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARGS = (jnp.ones((8, 64)), jnp.ones((64, 32)), jnp.ones((32,)), jnp.ones((32,)), jnp.ones((32,)))


def flattened(jaxpr):
    """The equations of a jaxpr with call-like equations replaced by their bodies (chapter 2's walk)."""
    for eqn in jaxpr.eqns:
        bodies = [v for v in eqn.params.values() if hasattr(v, "eqns") or hasattr(v, "jaxpr")]
        if eqn.primitive.name in ("jit", "pjit", "closed_call", "custom_jvp_call", "custom_vjp_call", "checkpoint") and bodies:
            yield from flattened(getattr(bodies[0], "jaxpr", bodies[0]))
        else:
            yield eqn


def test_a_jaxpr_equation_knows_its_users_line_and_columns(probe):
    import jax.extend.source_info_util  # noqa: F401  (the public name of the summary)

    eqns = jax.make_jaxpr(probe.f)(*ARGS).jaxpr.eqns
    dot = eqns[0]
    frame = source_info_util.user_frame(dot.source_info.traceback)
    assert (dot.primitive.name, frame.file_name.rsplit("/", 1)[-1], frame.start_line, frame.start_column,
            frame.end_line, frame.end_column) == ("dot_general", "probe.py", 6, 8, 6, 13)
    assert jax.extend.source_info_util.summarize(dot.source_info).endswith("probe.py:6:8 (f)")
    gelu = [e for e in flattened(jax.make_jaxpr(probe.f)(*ARGS).jaxpr)
            if source_info_util.user_frame(e.source_info.traceback).start_line == 8]
    assert len(gelu) == 8  # every equation of jax.nn.gelu gets the call site's line


def test_stablehlo_locations_are_aliases_names_and_call_sites(probe):
    text = jax.jit(probe.f).lower(*ARGS).as_text(debug_info=True)
    assert re.search(r'#loc\d+ = loc\("[^"]*probe\.py":6:8 to :13\)', text)
    assert re.search(r'#loc\d+ = loc\("f"\(#loc\d+\)\)', text)
    assert re.search(r"#loc\d+ = loc\(callsite\(#loc\d+ at #loc\d+\)\)", text)
    assert re.search(r'#loc\d+ = loc\("jit\(f\)/dot_general"\(#loc\d+\)\)', text)
    assert re.search(r"stablehlo\.dot_general .* loc\(#loc\d+\)", text)
    sort = jax.jit(jnp.sort).lower(jnp.ones((8,))).as_text(debug_info=True)
    assert re.search(r'"stablehlo\.sort".*\(\{$', sort, re.MULTILINE)  # a body on the following lines ...
    assert re.search(r"^\s*\}\) : .* loc\(#loc\d+\)$", sort, re.MULTILINE)  # ... and the location on its closing line


def test_optimized_hlo_keeps_locations_in_tables(probe):
    hlo = jax.jit(probe.f).lower(*ARGS).compile().as_text()
    assert all(table in hlo for table in ("FileNames", "FileLocations", "StackFrames"))
    assert re.search(r'metadata=\{op_name="jit\(f\)/dot_general" stack_frame_id=\d+', hlo)
    assert "source_line=" not in hlo


def test_the_optimized_hlo_keeps_one_location_per_start(probe):
    """Line 12's products and sums all start at column 11: StableHLO keeps a range for each, the
    optimized HLO one location for them all."""
    text = jax.jit(probe.f).lower(*ARGS).as_text(debug_info=True)
    stablehlo = set(re.findall(r'probe\.py":12:11 to :(\d+)', text))
    module = hlo_text.parse(jax.jit(probe.f).lower(*ARGS).compile().as_text())
    hlo = {loc.end_column for loc in map(module.location, module.instructions()) if loc and (loc.line, loc.column) == (12, 11)}
    assert len(stablehlo) == 3 and len(hlo) == 1


def test_xla_renames_what_it_rewrites(probe):
    module = hlo_text.parse(jax.jit(probe.scaled).lower(jnp.ones((8, 128))).compile().as_text())
    ops = {(i.opcode, i.op_name) for i in module.instructions() if i.op_name}
    assert ("multiply", "jit(scaled)/div") in ops  # x / 8.0 became a multiply that still says div
    assert not any("stop_gradient" in name for _, name in ops)  # no op of its own


def test_xla_cpu_duplicates_a_cheap_producer_into_several_fusions(probe):
    module = hlo_text.parse(jax.jit(probe.f).lower(*ARGS).compile().as_text())
    line_7 = {i.computation for i in module.instructions()
              if (loc := module.location(i)) and loc.line == 7 and i.computation != module.entry.name}
    assert len(line_7) == 4


def loss(logits, labels):
    return -jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(labels, 10))


def test_a_library_jit_is_a_private_function_called_from_main():
    args = jnp.ones((8, 10)), jnp.zeros((8,), jnp.int32)
    text = jax.jit(loss).lower(*args).as_text(debug_info=True)
    assert re.search(r"call @_one_hot\(", text) and re.search(r"func\.func private @_one_hot\(", text)
    assert re.search(r'#loc\d+ = loc\("eq"\)', text)  # a body op names its primitive, and no file
    assert re.search(r'loc\("jit\(loss\)/jit\(_one_hot\)"\(#loc\d+\)\)', text)
    hlo = jax.jit(loss).lower(*args).compile().as_text()
    assert not re.search(r"=\s*\S+ call\(", hlo.split("ENTRY", 1)[1])  # XLA inlined the calls


def test_xla_cpu_rewrites_dots_before_it_prints_them():
    """Batch dimensions moved to the front (a transpose added); an outer product made a multiply; a
    matrix-vector product left a dot."""
    def compiled(fn, *shapes):
        return hlo_text.parse(jax.jit(fn).lower(*[jnp.ones(s) for s in shapes]).compile().as_text())

    batched = compiled(lambda a, b: jax.lax.dot_general(a, b, (((0,), (2,)), ((2,), (0,)))), (32, 8, 4), (4, 16, 32))
    (dot,) = [i for i in batched.instructions() if i.opcode == "dot"]
    assert (dot.attribute("lhs_batch_dims"), dot.attribute("rhs_batch_dims")) == ("{0}", "{0}")
    assert any(i.opcode == "transpose" for i in batched.instructions())
    outer = {i.opcode for i in compiled(lambda a, b: jnp.einsum("i,j->ij", a, b), (64,), (32,)).instructions()}
    assert "dot" not in outer and "multiply" in outer
    matvec = {i.opcode for i in compiled(jnp.matmul, (64, 32), (32,)).instructions()}
    assert "dot" in matvec


@pytest.mark.parametrize("chip", ["v4", "v5e", "v5p", "v6e"])
def test_xla_tpu_writes_matrix_products_as_convolutions(chip):
    compile_for = compiler()

    def opcodes(fn, *shapes, dtype=jnp.bfloat16):
        module = hlo_text.parse(compile_for(fn, *[jax.ShapeDtypeStruct(s, dtype) for s in shapes], chip=chip).optimized_hlo)
        return {i.opcode for i in module.instructions()}

    dtypes = (jnp.float32, jnp.bfloat16, jnp.int8) if chip == "v5e" else (jnp.bfloat16,)
    for dtype in dtypes:
        for shapes in (((3, 5), (5, 7)), ((256, 512), (512, 384))):
            product = opcodes(jnp.matmul, *shapes, dtype=dtype)
            assert "convolution" in product and "dot" not in product, (dtype, shapes)
    batched = opcodes(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b), (4, 256, 512), (4, 512, 128))
    assert "convolution" in batched and "dot" not in batched
    matvec = opcodes(jnp.matmul, (512, 256), (256,))
    outer = opcodes(lambda a, b: jnp.einsum("i,j->ij", a, b), (512,), (256,))
    assert not {"convolution", "dot"} & (matvec | outer) and {"multiply", "reduce"} <= matvec and "multiply" in outer


def dump_programs():
    spec = importlib.util.spec_from_file_location("programs", DUMPS / "programs.py")
    programs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(programs)
    return programs


def test_the_dots_programs_convolutions_as_the_chapter_prints_them():
    programs = dump_programs()
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in programs.ARGS["dots"]]
    hlo = compiler()(programs.dots, *args).optimized_hlo
    assert re.search(r"= f32\[384,256\]\{1,0:T\(8,128\)\} convolution\(%\S+, %\S+\), dim_labels=fb_oi->bf", hlo)
    assert re.search(r"= f32\[4,128,384\]\{2,1,0:T\(8,128\)\} convolution\(%\S+, %\S+\), "
                     r"window=\{size=4 stride=3 lhs_dilate=4\}, dim_labels=b0f_0oi->0bf", hlo)


def test_the_mlp_blocks_tpu_layouts_and_memory_spaces():
    programs = dump_programs()
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in programs.ARGS["mlp_block"]]
    hlo = compiler()(programs.mlp_block, *args).optimized_hlo
    assert re.search(r"= bf16\[256,512\]\{1,0:T\(8,128\)\(2,1\)\} parameter\(0\)", hlo)
    assert re.search(r"= \(bf16\[256,512\]\{1,0:T\(8,128\)\(2,1\)S\(1\)\}, bf16\[256,512\]\{1,0:T\(8,128\)\(2,1\)\}, "
                     r"u32\[\]\{:S\(2\)\}\) copy-start\(", hlo)
    assert re.search(r"= f32\[1,256\]\{1,0:T\(1,128\)\} parameter\(2\)", hlo)
    assert re.search(r"= f32\[256,256\]\{1,0:T\(8,128\)S\(1\)\} fusion\(.*kind=kOutput", hlo)
    assert re.search(r"ROOT \S+ = f32\[256,256\]\{1,0:T\(8,128\)\} fusion\(.*kind=kLoop", hlo)
    assert "custom_call_target=\"tpu_custom_call\"" in hlo
    cpu = jax.jit(programs.mlp_block).lower(*args).compile().as_text()
    assert "T(" not in cpu and re.search(r"f32\[256,256\]\{1,0\}", cpu)


def test_the_shipped_dumps_small_tiles_and_allocate_buffer():
    dots, mlp, scan = (hlo_text.read_dump(DUMPS / name, REPO).text for name in
                       ("v5e_dots.hlo.txt", "v5e_mlp_block.hlo.txt", "v5e_sharded_scan.hlo.txt"))
    assert re.search(r"bf16\[128,4,256\]\{[\d,]+:T\(4,128\)", dots)
    assert re.search(r"\[\d+\]\{0:T\(256\)", mlp) and re.search(r"\[\]\{:T\(128\)\}", mlp)
    assert 'custom_call_target="AllocateBuffer"' in scan
    assert "known_trip_count" not in dots + mlp + scan


def test_xla_cpu_puts_a_scans_loop_in_a_call_and_writes_its_trip_count():
    def program(x):
        return jax.lax.scan(lambda c, row: (c + row, c), jnp.zeros(16), x)[1]

    module = hlo_text.parse(jax.jit(program).lower(jnp.ones((7, 16))).compile().as_text())
    loops = [i for i in module.instructions() if i.opcode == "while"]
    assert len(loops) == 1 and loops[0].computation != module.entry.name
    assert any(i.opcode == "call" and loops[0].computation in i.called for i in module.entry.instructions)
    assert re.search(r'"known_trip_count":\{"n":"7"\}', loops[0].attributes)


def test_the_cache_key_setting_says_why_it_exists():
    import inspect

    from jax._src import config

    source = inspect.getsource(config)
    block = source[source.index("name='jax_compilation_cache_include_metadata_in_key'"):][:600]
    assert "executables loaded from the cache may have stale metadata" in re.sub(r"'\s+'", "", block)


def test_which_buffer_of_a_summed_sort_is_largest():
    def program(a):
        return (jnp.sort(a, axis=0).astype(jnp.float32) * 2.0).sum(axis=0)

    module = hlo_text.parse(jax.jit(program).lower(jnp.ones((4, 96), jnp.bfloat16)).compile().as_text())
    largest = {array for _, array in hlo_text.largest_arrays(module)}
    assert largest == for_this_jax({"0.10.2": {"f32[4,96]"}, "0.11.2": {"bf16[4,96]"},
                                         "0.12.0.1": {"bf16[4,96]"}})
