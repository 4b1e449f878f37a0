"""Chapter 4's claims about what XLA:CPU and XLA:TPU (for a v5e) make of its programs.

docs/facts.md lists each claim with the README line it backs. The v5e tests compile with the
real TPU compiler (libtpu, the tpu-compile extra) and skip without it; the shipped v5e dump is
read without it.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_tpucourse import chips, references
from pytest_tpucourse.readers import hlo_text

from .reading import (COURSE, MEASURED_JAX, cpu_compiled, cpu_hlo, fusion_kind, graded_tests, kept_args,
                      kept_entry, kept_kernels, kept_sweep, kept_tpu_facts, kernels, mosaic_text, opcodes,
                      readme_block, readme_prose, solution, v5e_compiled, v5e_hlo, versions)

SEQ_LENS = (256, 512, 1024, 2048)
DUMP = COURSE / "exercises" / "ch12" / "dumps" / "v5e_naive_attention.hlo.txt"


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _softmax(x):
    return jax.nn.softmax(x, axis=-1)


def _tanh_chain(x):
    return jnp.tanh(x) * 2 + 1


def _work(module, instruction):
    """What a kernel computes: its own opcode, or its fusion's opcodes but for plumbing."""
    if instruction.opcode != "fusion":
        return [instruction.opcode]
    return [op for called in instruction.called for op in opcodes(module, called)
            if op not in ("parameter", "constant", "bitcast", "fusion")]


@pytest.fixture(scope="module")
def naive_attention_v5e():
    """Chapter 4's naive_attention at (1, 2, 256, 64) f32, compiled for a v5e: the dump's program."""
    q = _f32(1, 2, 256, 64)
    return v5e_hlo(solution("ch04.fusion.naive_attention"), q, q, q)


# ------------------------------------------------------------------ XLA:CPU


def test_the_readme_tanh_chain_is_what_xla_cpu_prints():
    module = cpu_hlo(_tanh_chain, _f32(128, 128))
    [fusion] = kernels(module)
    assert (fusion.name, fusion.attribute("kind")) == ("broadcast_add_fusion", "kLoop"), versions()
    assert [op for op in opcodes(module, fusion.called[0]) if op in ("tanh", "multiply", "add")] == [
        "tanh", "multiply", "add"]
    if MEASURED_JAX:  # the very lines the chapter shows
        printed = cpu_compiled(_tanh_chain, _f32(128, 128)).as_text()
        printed = {re.sub(r",\s*metadata=\{[^}]*\}", "", line).rstrip() for line in printed.splitlines()}
        shown = [line for line in readme_block("ch04", "%fused_computation").splitlines() if line.strip() != "..."]
        assert [line for line in shown if line.rstrip() not in printed] == [], versions()


def test_the_tanh_chain_costs_one_read_and_one_write():
    analysis = cpu_compiled(_tanh_chain, _f32(128, 128)).cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    assert {"flops", "transcendentals", "bytes accessed"} <= set(analysis)
    assert {"bytes accessed0{}", "bytes accessedout{}"} <= set(analysis), "per-operand breakdowns"
    assert analysis["bytes accessed"] == 2 * 128 * 128 * 4, versions()


def test_softmax_on_xla_cpu_is_four_fusions_the_first_of_max_and_exp():
    module = cpu_hlo(_softmax, _f32(256, 512))
    found = [(fusion_kind(i), _work(module, i)) for i in kernels(module)]
    assert [kind for kind, _ in found] == ["kCustom[__ynn_fusion]", "kCustom[__ynn_fusion]", "kLoop", "kLoop"], found
    assert found[0][1] == ["reduce", "broadcast", "subtract", "exponential"], found
    assert found[1][1] == ["reduce"] and "divide" in found[2][1] and "multiply" in found[3][1], found


def test_sort_and_host_callbacks_are_kernels_between_fusions_on_xla_cpu():
    sort = [i.opcode for i in kernels(cpu_hlo(lambda x: jnp.sort(jnp.tanh(x) * 2) + 1, _f32(1024)))]
    assert sort == ["fusion", "sort", "fusion"], sort

    def callback(x):
        return jax.pure_callback(np.tanh, jax.ShapeDtypeStruct(x.shape, x.dtype), x * 2) + 1

    assert [i.opcode for i in kernels(cpu_hlo(callback, _f32(1024)))] == ["fusion", "custom-call", "fusion"]


def test_naive_attention_on_xla_cpu_is_five_kernels_two_of_them_writing_scores():
    q = _f32(1, 2, 256, 64)
    module = cpu_hlo(solution("ch04.fusion.naive_attention"), q, q, q)
    found = kernels(module)
    assert len(found) == 5, [i.name for i in found]
    square = [(i.name, hlo_text.array_text(*i.arrays[0])) for i in found if i.arrays[0][1][-2:] == (256, 256)]
    assert [array for _, array in square] == ["f32[1,2,256,256]", "f32[2,256,256]"], square
    first = module.entry.instruction(square[0][0])
    assert fusion_kind(first) == "kCustom[__ynn_fusion]"
    assert _work(module, first)[0] == "dot" and _work(module, first)[-1] == "exponential", _work(module, first)
    assert fusion_kind(module.entry.instruction(square[1][0])) == "kLoop"


def test_bytes_accessed_over_the_sweep_and_their_slopes():
    def bytes_accessed(fn, s):
        analysis = cpu_compiled(fn, _f32(1, 1, s, 64), _f32(1, 1, s, 64), _f32(1, 1, s, 64)).cost_analysis()
        return (analysis[0] if isinstance(analysis, (list, tuple)) else analysis)["bytes accessed"]

    def layer_norm(q, k, v):
        return references.LAYERNORM.floor(q, k[0, 0, 0], v[0, 0, 0])

    attention = [bytes_accessed(solution("ch04.fusion.naive_attention"), s) for s in SEQ_LENS]
    rows = [bytes_accessed(layer_norm, s) for s in SEQ_LENS]
    if MEASURED_JAX:
        assert attention == [1_576_960, 5_775_360, 22_036_480, 86_016_000], versions()
        assert rows == [400_904, 801_288, 1_602_056, 3_203_592], versions()
    slopes = [np.polyfit(np.log(SEQ_LENS), np.log(values), 1)[0] for values in (attention, rows)]
    assert np.round(slopes, 2).tolist() == [1.92, 1.0]


def test_gelu_bias_in_bf16_is_one_fusion_on_xla_cpu():
    x, b = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16), jax.ShapeDtypeStruct((512,), jnp.bfloat16)
    found = kernels(cpu_hlo(solution("ch04.fusion.gelu_bias"), x, b))
    assert [(i.opcode, fusion_kind(i)) for i in found] == [("fusion", "kLoop")], versions()


# ------------------------------------------------------------------ XLA:TPU for a v5e


def test_softmax_on_a_v5e_is_three_kernels_and_the_copy_of_x():
    module = v5e_hlo(_softmax, _f32(256, 512))
    found = [(i.opcode, _work(module, i)) for i in kernels(module)]
    assert [op for op, _ in found] == ["copy-start", "reduce", "copy-done", "fusion", "fusion"], found
    sums, divides = found[3][1], found[4][1]
    assert "exponential" in sums and "reduce" in sums and "divide" not in sums, sums
    assert "exponential" in divides and "divide" in divides, divides
    assert {fusion_kind(i) for i in kernels(module) if i.opcode == "fusion"} == {"kLoop"}
    [x] = [i for i in module.entry.instructions if i.opcode == "parameter"]
    assert x.shape == "f32[256,512]{1,0:T(8,128)}", x.shape


def test_a_v5e_fuses_two_reductions_into_one_multi_output_kloop_fusion():
    module = v5e_hlo(lambda x: (x.sum(-1), x.max(-1)), _f32(1024, 1024))
    [fusion] = [i for i in kernels(module) if i.opcode == "fusion"]
    assert fusion_kind(fusion) == "kLoop"
    assert re.sub(r"\s", "", fusion.shape) == "(f32[1024]{0:T(1024)},f32[1024]{0:T(1024)})", fusion.shape


def test_sorts_are_kernels_between_fusions_on_a_v5e():
    module = v5e_hlo(lambda x: jnp.sort(jnp.tanh(x) * 2) + 1, _f32(1024))
    assert [i.opcode for i in kernels(module) if i.opcode in ("fusion", "sort")] == ["fusion", "sort", "fusion"]


def test_a_v5e_dot_fusion_absorbs_its_producers_and_consumers():
    def mlp(x, w, b):
        return jax.nn.relu(jnp.dot(jnp.tanh(x.astype(jnp.float32) * 2 + 1), w.astype(jnp.float32)) + b)

    module = v5e_hlo(mlp, jax.ShapeDtypeStruct((256, 512), jnp.bfloat16),
                     jax.ShapeDtypeStruct((512, 384), jnp.bfloat16), _f32(384))
    found = kernels(module)
    assert [i.opcode for i in found] == ["copy-start", "copy-done", "fusion"], [i.name for i in found]
    assert fusion_kind(found[2]) == "kOutput"
    work = _work(module, found[2])
    assert {"convert", "multiply", "add", "tanh", "convolution", "maximum"} <= set(work), work


def test_gelu_bias_in_bf16_on_a_v5e_is_a_convert_and_one_fusion():
    x, b = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16), jax.ShapeDtypeStruct((512,), jnp.bfloat16)
    module = v5e_hlo(solution("ch04.fusion.gelu_bias"), x, b)
    found = kernels(module)
    assert [i.opcode for i in found] == ["convert", "fusion"], [i.name for i in found]
    assert hlo_text.array_text(*found[0].arrays[0]) == "f32[512]" and fusion_kind(found[1]) == "kLoop"
    layouts = {p.shape for p in module.entry.instructions if p.opcode == "parameter"}
    assert "bf16[256,512]{1,0:T(8,128)(2,1)}" in layouts, layouts


def _check_online_softmax(module):
    """What chapter 4 says of naive_attention on a v5e, read off one optimized HLO module."""
    found = kernels(module)
    [scores] = [i for i in found if i.opcode == "fusion" and i.arrays[0] == ("f32", (2, 256, 256))]
    assert fusion_kind(scores) == "kOutput" and "S(1)" in scores.shape, scores.shape
    assert {"convolution", "multiply"} <= set(_work(module, scores))
    [custom] = [i for i in found if i.opcode == "custom-call"]
    assert (custom.name, custom.attribute("custom_call_target")) == ("online-softmax", '"tpu_custom_call"')
    assert custom.operands[0] == scores.name, "the online softmax reads the scores the fusion wrote"
    kernel = mosaic_text(custom)
    assert "iteration_bounds = array<i64: 2, 1, 1>" in kernel and "scratch_operands = 2" in kernel, kernel[:600]
    assert re.search(r"dimension_semantics = \[[^]]*parallel>, [^]]*parallel>, [^]]*arbitrary>\]", kernel)
    assert "vector.multi_reduction <maximumf>" in kernel and "arith.maximumf" in kernel
    assert re.search(r"arith\.subf %\w+, %\w+ : vector<1x256x1xf32>", kernel), "m_old - m_new, per row"
    assert re.search(r"math\.exp %\w+ : vector<1x256x1xf32>", kernel), "exp(m_old - m_new), per row"
    assert kernel.count("tpu.matmul") == 1 and "contract_precision<bf16>" in kernel
    assert [i for i in found if i.opcode == "copy"], "v and the output change layout in copies"


def test_naive_attention_on_a_v5e_writes_the_scores_and_runs_an_online_softmax(naive_attention_v5e):
    _check_online_softmax(naive_attention_v5e)


def test_the_shipped_v5e_dump_shows_the_online_softmax():
    dump = hlo_text.read_dump(DUMP, COURSE)
    assert "programs.naive_attention(float32[1, 2, 256, 64]" in dump.header
    assert "command: python bench/capture_tpu_dumps.py --only naive_attention" in dump.header
    _check_online_softmax(hlo_text.parse(dump.text))


def test_the_shipped_v5e_dump_is_what_this_libtpu_compiles(naive_attention_v5e):
    def shape_of(module):
        return [(i.opcode, i.name, hlo_text.array_text(*i.arrays[0]) if i.arrays else "")
                for i in kernels(module)]

    shipped = hlo_text.parse(hlo_text.read_dump(DUMP, COURSE).text)
    assert shape_of(shipped) == shape_of(naive_attention_v5e), versions()


def test_no_program_here_prints_an_input_fusion():
    q = _f32(1, 2, 256, 64)
    modules = [cpu_hlo(_softmax, _f32(256, 512)), cpu_hlo(solution("ch04.fusion.naive_attention"), q, q, q),
               cpu_hlo(lambda x: (x.sum(-1), x.max(-1)), _f32(1024, 1024)),
               hlo_text.parse(hlo_text.read_dump(DUMP, COURSE).text)]  # XLA:TPU's, for a v5e
    kinds = {fusion_kind(i) for module in modules for i in module.instructions() if i.opcode == "fusion"}
    assert "kInput" not in kinds, kinds


# ------------------------------------------------------------------ XLA:TPU for a v5e, as kept
#
# exercises/ch04/facts/v5e.json and v5e.hlo.txt, written by bench/capture_tpu_facts.py: what the graded
# tests assert on a TPU backend, and what the README quotes beside XLA:CPU's figures.

TPU_SWEEP = (256, 512, 1024, 2048, 4096, 8192, 16384)


def _fit(sweep: dict, lengths) -> float:
    return float(np.polyfit(np.log(lengths), np.log([sweep[s] for s in lengths]), 1)[0])


def _table_row(label: str, values) -> str:
    return f"| {label} | " + " | ".join(f"{int(v):,}" for v in values) + " |"


def test_the_kept_tpu_facts_are_the_readmes_and_this_libtpu_compiles_them():
    """The README's v5e table is the kept figures; the described v5e's compiler of the installed libtpu
    gives the same figures and kernels (one program each side of where the scores leave VMEM)."""
    facts = kept_tpu_facts("ch04")
    assert facts["captured"]["chip"] == "v5e" and facts["captured"]["backend"] == "tpu", facts["captured"]
    attention = kept_sweep(facts, "attention_floor", "bytes_accessed")
    rows = kept_sweep(facts, "layer_norm", "bytes_accessed")
    assert tuple(attention) == tuple(rows) == TPU_SWEEP
    readme = readme_prose("ch04")
    assert _table_row("`attention_floor`, bytes accessed", attention.values()) in readme
    assert _table_row("layer norm of (S, 64), bytes accessed", rows.values()) in readme
    for key in ("gelu_bias bfloat16", "attention_floor S=4096", "attention_floor S=8192"):
        kept = facts["programs"][key]
        fn = solution("ch04.fusion.gelu_bias") if key.startswith("gelu") else references.attention_floor
        compiled = v5e_compiled(fn, *kept_args(kept))
        assert (compiled.bytes_accessed, compiled.temp_bytes) == (kept["bytes_accessed"], kept["temp_bytes"]), (
            key, versions())
        assert sorted(i.opcode for i in kernels(hlo_text.parse(compiled.optimized_hlo))) == sorted(
            k[0] for k in kept_kernels(kept)), (key, versions())  # the same kernels, in whatever schedule


def test_on_a_v5e_gelu_bias_in_bf16_is_a_convert_and_one_fusion_which_the_graded_test_allows():
    facts = kept_tpu_facts("ch04")["programs"]
    f32, bf16 = kept_kernels(facts["gelu_bias float32"]), kept_kernels(facts["gelu_bias bfloat16"])
    assert [k[0] for k in f32] == ["fusion"], f32
    assert [k[0] for k in bf16] == ["convert", "fusion"] and bf16[0][1].startswith("f32[512]"), bf16
    graded = graded_tests("ch04", "test_fusion")
    on_a_tpu, on_a_cpu = graded.CONVERTS_THE_BIAS_ALONE["tpu"], graded.CONVERTS_THE_BIAS_ALONE["cpu"]
    assert graded.gelu_bias_kernels_wrong(bf16, 512, converts_the_bias_alone=on_a_tpu) is None
    assert graded.gelu_bias_kernels_wrong(bf16, 512, converts_the_bias_alone=on_a_cpu) == (
        "compiles to 2 kernel(s), expected exactly one fusion")
    assert graded.gelu_bias_kernels_wrong(bf16 + f32, 512, converts_the_bias_alone=True), "a second fusion is caught"


def test_on_a_v5e_attentions_bytes_fit_s_squared_from_1024_where_the_graded_sweep_looks():
    facts = kept_tpu_facts("ch04")
    attention = kept_sweep(facts, "attention_floor", "bytes_accessed")
    rows = kept_sweep(facts, "layer_norm", "bytes_accessed")
    fits = [round(_fit(sweep, lengths), 2) for sweep in (attention, rows)
            for lengths in ((256, 512, 1024, 2048), (1024, 2048, 4096, 8192))]
    assert ("over S = 256..2048 the bytes fit S^%.2f, over 1024..8192 S^%.2f (layer norm: S^%.2f and S^%.2f)"
            % tuple(fits)) in readme_prose("ch04")
    per_score = (attention[16384] - 2 * attention[8192]) / (2 * 8192 ** 2)  # the S² coefficient
    per_row = (attention[8192] - per_score * 8192 ** 2) / 8192
    assert (round(per_score, 1), round(per_row, -2)) == (12.0, 3100.0), (per_score, per_row)
    graded = graded_tests("ch04", "test_scaling")
    low, high = graded.ATTENTION_EXPONENT
    assert low <= _fit(attention, graded.BACKEND_SWEEPS["tpu"]) <= high
    assert not low <= _fit(attention, graded.BACKEND_SWEEPS["cpu"]) <= high, "XLA:CPU's sweep would fail on a TPU"
    assert graded.ROW_OP_EXPONENT[0] <= _fit(rows, graded.BACKEND_SWEEPS["tpu"]) <= graded.ROW_OP_EXPONENT[1]


def test_on_a_v5e_the_sweeps_scores_are_written_once_and_read_twice_in_vmem_up_to_4096():
    assert chips.get_chip("v5e").vmem_bytes == 128 * 2 ** 20  # 4096² f32 scores are half of it
    for s in TPU_SWEEP:
        module = kept_entry("ch04", f"attention_floor S={s}")
        [writer] = [i for i in kernels(module) if (("f32", (s, s)) in i.arrays)]
        assert writer.opcode == "fusion" and fusion_kind(writer) == "kOutput" and len(writer.arrays) == 2, writer.shape
        assert ("S(1)" in writer.shape.split(f"[{s},{s}]")[1].split("}")[0]) == (s <= 4096), (s, writer.shape)
        [scores] = [i for i in module.entry.instructions if i.opcode == "get-tuple-element"
                    and i.operands == [writer.name] and i.arrays == [("f32", (s, s))]]
        readers = [i for i in kernels(module) if scores.name in i.operands]
        assert [fusion_kind(i) for i in readers] == ["kLoop", "kOutput"], [i.name for i in readers]
