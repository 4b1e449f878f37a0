"""Chapter 5's claims about what XLA:CPU compiles streaming attention, its gradient and naive attention to.

docs/facts.md lists each claim with the README line it backs. The tables' exact bytes are held on
the JAX releases the chapter was measured on; on any other JAX the tests hold the claims the
chapter draws from them (the exponents and ratios).
"""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_tpucourse import references
from pytest_tpucourse.readers import hlo_text

from .reading import (COURSE, MEASURED_JAX, cpu_compiled, cpu_hlo, fusion_kind, graded_tests, kept_args,
                      kept_sweep, kept_tpu_facts, kernels, readme_prose, solution, v5e_compiled, versions)

SEQ_LENS = (256, 512, 1024, 2048)
SQUARE = 2048 * 2048 * 4  # one f32 S x S matrix at S = 2048
# temp_size_in_bytes over SEQ_LENS, as the README's table gives them, per measured JAX.
NAIVE_TEMP = {"0.10.2": [524_288, 2_097_152, 8_388_608, 33_554_432],
              "0.11.2": [524_288, 2_097_152, 8_388_608, 33_554_432],
              "0.12.0.1": [525_312, 2_099_200, 8_392_704, 33_562_624]}
STREAMING_TEMP = {"0.10.2": [430_200, 827_512, 1_622_136, 3_211_384],
                  "0.11.2": [430_200, 827_512, 1_622_136, 3_211_384],
                  "0.12.0.1": [299_128, 565_368, 1_097_848, 2_162_808]}
# The gradient's exponent and its temp at S = 2048 in one S x S matrix; the same, scan step checkpointed.
GRADIENT = {"0.10.2": (1.72, 2.83, 0.93), "0.11.2": (1.72, 2.83, 0.93), "0.12.0.1": (1.76, 2.77, 0.86)}


def _specs(s):
    x = jax.ShapeDtypeStruct((1, 1, s, 64), jnp.float32)
    return x, x, x


def _temp(fn, s):
    return cpu_compiled(fn, *_specs(s)).memory_analysis().temp_size_in_bytes


def _exponent(values):
    return float(np.polyfit(np.log(SEQ_LENS), np.log(values), 1)[0])


def _streaming(q, k, v):
    return solution("ch05.streaming.streaming_attention")(q, k, v, block_k=128)


@pytest.fixture(scope="module")
def checkpointed_step(tmp_path_factory):
    """The solution's streaming attention with its scan step under jax.checkpoint (a textual edit,
    as the mutants make theirs)."""
    source = (COURSE / "solutions" / "ch05" / "streaming.py").read_text()
    assert source.count("lax.scan(step, init") == 1
    path = tmp_path_factory.mktemp("ch05") / "streaming_checkpointed.py"
    path.write_text(source.replace("lax.scan(step, init", "lax.scan(jax.checkpoint(step), init"))
    spec = importlib.util.spec_from_file_location("streaming_checkpointed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return lambda q, k, v: module.streaming_attention(q, k, v, block_k=128)


def _gradient(attention):
    return jax.grad(lambda q, k, v: attention(q, k, v).sum(), argnums=(0, 1, 2))


@pytest.fixture(scope="module")
def gradients(checkpointed_step):
    """The gradient of streaming attention compiled over SEQ_LENS, and with its step checkpointed at
    2048: the two tests below read the same compiles."""
    plain = {s: cpu_compiled(_gradient(_streaming), *_specs(s)) for s in SEQ_LENS}
    return plain, cpu_compiled(_gradient(checkpointed_step), *_specs(2048))


def test_a_scan_compiles_to_a_while_loop_on_xla_cpu():
    opcodes = {i.opcode for i in cpu_hlo(_streaming, *_specs(512)).instructions()}
    assert "while" in opcodes, versions()


def test_temp_bytes_of_naive_and_streaming_attention():
    naive = [_temp(references.attention_floor, s) for s in SEQ_LENS]
    streaming = [_temp(_streaming, s) for s in SEQ_LENS]
    if MEASURED_JAX:
        assert (naive, streaming) == (NAIVE_TEMP[jax.__version__], STREAMING_TEMP[jax.__version__]), versions()
    assert round(_exponent(naive), 2) == 2.0 and all(t >= 2 * s * s * 4 for t, s in zip(naive, SEQ_LENS))
    assert _exponent(streaming) < 1.0 and streaming[-1] < SQUARE / 2, versions()


def test_streaming_attentions_forward_holds_nothing_of_size_sq_by_skv():
    module = cpu_hlo(_streaming, *_specs(2048))
    largest = max(int(np.prod(dims)) for i in module.instructions() for _, dims in i.arrays)
    assert largest < 2048 * 2048, versions()


def test_at_4096_naive_attention_is_one_ynn_fusion_and_the_floor_keeps_its_two_buffers():
    naive = solution("ch04.fusion.naive_attention")
    compiled = cpu_compiled(naive, *_specs(4096))
    [kernel] = kernels(hlo_text.parse(compiled.as_text()))
    assert fusion_kind(kernel) == "kCustom[__ynn_fusion]", versions()
    assert compiled.memory_analysis().temp_size_in_bytes == 0
    assert _temp(references.attention_floor, 4096) >= 2 * 4096 * 4096 * 4


def test_the_gradient_brings_the_s_squared_back_and_checkpointing_the_step_most_of_it_away(gradients):
    plain = [compiled.memory_analysis().temp_size_in_bytes for compiled in gradients[0].values()]
    checkpointed = gradients[1].memory_analysis().temp_size_in_bytes
    read = (round(_exponent(plain), 2), round(plain[-1] / SQUARE, 2), round(checkpointed / SQUARE, 2))
    if MEASURED_JAX:
        assert read == GRADIENT[jax.__version__], versions()
    assert read[0] > 1.6 and read[1] > 2 and read[2] < 1, (read, versions())


def test_the_gradient_stacks_every_steps_probabilities_and_the_checkpointed_one_only_its_carries(gradients):
    steps = 2048 // 128

    def stacked(compiled):
        module = hlo_text.parse(compiled.as_text())
        return {dims[-1] for i in module.instructions() for _, dims in i.arrays
                if len(dims) == 5 and dims[0] == steps and dims[-2] == 2048}

    plain, checkpointed = stacked(gradients[0][2048]), stacked(gradients[1])
    assert {128, 64} <= plain, (plain, versions())  # (Sq, block_k) blocks and (Sq, D) accumulators
    assert 64 in checkpointed and 128 not in checkpointed, (checkpointed, versions())


# ------------------------------------------------------------------ XLA:TPU for a v5e, as kept
#
# exercises/ch05/facts/v5e.json, written by bench/capture_tpu_facts.py: what the graded tests assert on a
# TPU backend, and what the README quotes beside XLA:CPU's figures.

TPU_SWEEP = (256, 512, 1024, 2048, 4096, 8192, 16384)


def test_on_a_v5e_naive_attentions_temp_is_0_until_its_scores_leave_vmem_and_streamings_always():
    facts = kept_tpu_facts("ch05")
    naive = kept_sweep(facts, "attention_floor", "temp_bytes")
    streaming = kept_sweep(facts, "streaming_attention", "temp_bytes")
    assert tuple(naive) == tuple(streaming) == TPU_SWEEP
    readme = readme_prose("ch05")
    for label, sweep in (("naive attention, temp bytes (v5e)", naive),
                         ("streaming attention, block_k = 128, temp bytes (v5e)", streaming)):
        assert f"| {label} | " + " | ".join(f"{t:,}" for t in sweep.values()) + " |" in readme
    assert [s for s, t in naive.items() if t == 0] == [256, 512, 1024, 2048, 4096]
    assert {naive[s] - s * s * 4 for s in (8192, 16384)} == {96_768}, naive
    assert set(streaming.values()) == {0}
    assert "from S = 8192 on the scores go to HBM, one f32 S × S matrix plus 96,768 bytes" in readme


def test_the_graded_tests_tpu_sweep_sees_the_scores_and_catches_one_block_of_everything():
    """On a TPU over XLA:CPU's sweep (S = 256..2048) naive attention's temp is 0 and streaming attention
    with one block of all the keys passes; the TPU's sweep tells both apart."""
    facts = kept_tpu_facts("ch05")
    graded = graded_tests("ch05", "test_memory")
    tpu, cpu = graded.SWEEPS["tpu"], graded.SWEEPS["cpu"]
    on_chip = graded.SCORES_MAY_STAY_ON_CHIP["tpu"]

    def temps(program, lengths):
        sweep = kept_sweep(facts, program, "temp_bytes")
        return [sweep[s] for s in lengths]

    assert graded.naive_scratch_wrong(temps("attention_floor", tpu), tpu, scores_may_stay_on_chip=on_chip) is None
    assert graded.naive_scratch_wrong(temps("attention_floor", cpu), cpu, scores_may_stay_on_chip=on_chip)
    assert graded.naive_scratch_wrong(temps("attention_floor", tpu), tpu, scores_may_stay_on_chip=False)
    assert graded.streaming_scratch_wrong(temps("streaming_attention", tpu), tpu) is None
    assert graded.streaming_scratch_wrong(temps("one_block", tpu), tpu)
    assert graded.streaming_scratch_wrong(temps("one_block", cpu), cpu) is None
    at = graded.FIGURE_AT["tpu"]
    assert kept_sweep(facts, "attention_floor", "temp_bytes")[at] > 0, "the figure compared is not 0"


def test_the_kept_temp_bytes_are_what_this_libtpu_compiles():
    """Each side of where the scores leave a v5e's VMEM, and streaming attention past it."""
    facts = kept_tpu_facts("ch05")["programs"]
    for key, fn in (("attention_floor S=4096", references.attention_floor),
                    ("attention_floor S=8192", references.attention_floor), ("streaming_attention S=8192", _streaming)):
        compiled = v5e_compiled(fn, *kept_args(facts[key]))
        assert compiled.temp_bytes == facts[key]["temp_bytes"], (key, versions())
