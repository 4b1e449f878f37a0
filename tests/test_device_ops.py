"""Per-op device time: each op's kind, read off the compiled program (the real XLA:TPU compiler for
a v5e where libtpu is installed: nothing runs) or off its name; and the one-custom-call rule."""

import pytest

from pytest_tpucourse import chips
from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse.gates import device_ops, timer

needs_libtpu = pytest.mark.skipif(not libtpu.available(), reason=libtpu.INSTALL_LINE)


@pytest.mark.parametrize("name, category, kind", [
    ("custom-call.3", "", device_ops.CUSTOM_CALL),
    ("flash_fwd.1", "custom-call", device_ops.CUSTOM_CALL),  # the trace's category says it
    ("flash_fwd.1", "", device_ops.OTHER),  # a kernel's name alone says nothing: never taken for a wrapper
    ("copy-start.2", "", device_ops.PREFETCH), ("copy-done", "", device_ops.PREFETCH),
    ("copy.4", "", device_ops.COPY), ("convert_multiply_fusion", "", device_ops.FUSION),
    ("all-gather-start.1", "", device_ops.COLLECTIVE),
])
def test_an_ops_kind_by_its_name_and_category(name, category, kind):
    assert device_ops.kind(name, category) == kind


def test_the_compiled_program_names_the_kind_even_under_another_numeric_suffix():
    known = {"flash_fwd.1": device_ops.CUSTOM_CALL, "fusion.3": device_ops.FUSION}
    assert device_ops.kind("flash_fwd.1", "", known) == device_ops.CUSTOM_CALL
    assert device_ops.kind("flash_fwd.7", "", known) == device_ops.CUSTOM_CALL
    assert device_ops.kind("%flash_fwd.1", "", known) == device_ops.CUSTOM_CALL
    assert device_ops.kind("copy.1", "", known) == device_ops.COPY  # not in the program: by its name


def test_one_custom_call_rule():
    row = device_ops.as_row([timer.OpTime("custom-call.1", "", 7e-4), timer.OpTime("copy.2", "", 3e-6)])
    assert "copy.2 (copy, 3.0 us)" in device_ops.beside_one_custom_call(row)
    two = device_ops.as_row([timer.OpTime("custom-call.1", "", 7e-4), timer.OpTime("custom-call.2", "", 1e-4)])
    assert "timed 2 custom calls" in device_ops.beside_one_custom_call(two)
    unknown = device_ops.as_row([timer.OpTime("flash_fwd.1", "", 7e-4), timer.OpTime("fusion.2", "", 1e-5)])
    assert device_ops.beside_one_custom_call(unknown) is None  # no op is recognisably the call: not judged
    assert device_ops.beside_one_custom_call(None) is None and device_ops.as_row(()) is None


@needs_libtpu
def test_xla_tpu_names_a_pallas_call_after_its_kernel_and_a_cast_around_it_is_a_fusion():
    """What the rule reads on the chip, read here off XLA:TPU's own program for a v5e: a kernel called
    on q cast to f32 and scaled, its output cast back (the splash ceiling's wrapper passes)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def wrapped(q):
        q = q.astype(jnp.float32) * 0.5
        out = pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct((512, 512), jnp.float32), name="my_kernel")(q)
        return out.astype(jnp.bfloat16)

    compiled = libtpu.compile_for(wrapped, jax.ShapeDtypeStruct((512, 512), jnp.bfloat16), chip=chips.get_chip("v5e"))
    known = device_ops.hlo_kinds(compiled.optimized_hlo)
    calls = [name for name, kind in known.items() if kind == device_ops.CUSTOM_CALL]
    assert [name.split(".")[0] for name in calls] == ["my_kernel"]
    assert device_ops.kind(calls[0]) == device_ops.OTHER  # its name alone would not say it
    fusions = [name for name, kind in known.items() if kind == device_ops.FUSION and "convert" in name]
    assert fusions, "the casts around the kernel compile to convert fusions"
    ops = [timer.OpTime(calls[0], "", 7e-4)] + [timer.OpTime(name, "", 5e-5) for name in fusions]
    assert all(name in device_ops.beside_one_custom_call(device_ops.as_row(ops, known)) for name in fusions)


@needs_libtpu
def test_xlas_4096_matmul_for_a_v5e_starts_with_a_cross_program_prefetch():
    """Why XLA's matmul time depends on the input rotation: its program prefetches an operand into VMEM."""
    import jax
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    compiled = libtpu.compile_for(lambda a, b: a @ b, x, x, chip=chips.get_chip("v5e"))
    assert device_ops.cross_program_prefetch(compiled.optimized_hlo)
    assert device_ops.hlo_kinds(compiled.optimized_hlo).get("copy-start") == device_ops.PREFETCH


@needs_libtpu
def test_gate_03s_forward_ceiling_compiles_to_one_custom_call_for_a_v5e():
    """Why gate 03 declares its forward ceiling one custom call: JAX's flash attention forward is
    exactly that on a v5e, nothing beside it (exercises/ch13/test_gate03.py)."""
    import functools

    import jax
    import jax.numpy as jnp

    from pytest_tpucourse import public_kernels

    s = jax.ShapeDtypeStruct((1, 2, 1024, 128), jnp.bfloat16)
    attention = functools.partial(public_kernels.flash_attention, causal=True, block_q=512, block_kv=1024)
    compiled = libtpu.compile_for(lambda q, k, v: attention(q, k, v), s, s, s, chip=chips.get_chip("v5e"))
    entry = compiled.optimized_hlo.split("ENTRY", 1)[1]
    ran = device_ops.hlo_kinds(entry)  # its parameters are no ops (named args_* on JAX 0.10.2, q_tile_ref on 0.12)
    assert [kind for kind in ran.values()] == [device_ops.CUSTOM_CALL], ran


@needs_libtpu
def test_xlas_skinny_matmul_for_a_v5e_prefetches_the_whole_weight_then_multiplies():
    """Chapter 10's worked example: the copy of the 32 MiB weight into VMEM, then the fusion reading it."""
    import jax
    import jax.numpy as jnp

    x, w = jax.ShapeDtypeStruct((8, 4096), jnp.bfloat16), jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    compiled = libtpu.compile_for(lambda a, b: a @ b, x, w, chip=chips.get_chip("v5e"))
    entry = compiled.optimized_hlo.split("ENTRY", 1)[1]
    ran = [(name, kind) for name, kind in device_ops.hlo_kinds(entry).items() if not name.startswith("args_")]
    assert ran == [("copy-start", device_ops.PREFETCH), ("copy-done", device_ops.PREFETCH),
                   ("fusion", device_ops.FUSION)]
    assert "fusion(%args_0_.3, %copy-done)" in entry and device_ops.cross_program_prefetch(entry)


RETURNED = """HloModule m
ENTRY %main.3 (args_0_.3: bf16[1024,512], args_1_.3: bf16[512,16384]) -> bf16[1024,16384] {
  %agm.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)S(1)} custom-call(%args_0_.3, %args_1_.3), custom_call_target="tpu_custom_call", backend_config={}
  ROOT %copy.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)} copy(%agm.1), backend_config={}
}
"""
CONSUMED = RETURNED.replace("ROOT %copy.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)} copy(%agm.1)",
                            "%copy.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)} copy(%agm.1)\n"
                            "  ROOT %f = f32[16384]{0} fusion(%copy.1), kind=kLoop")
IN_HBM = RETURNED.replace("(2,1)S(1)} custom-call", "(2,1)} custom-call")


def test_only_the_copy_of_a_kernels_vmem_result_that_the_program_returns_is_the_boundarys():
    assert device_ops.result_copies(RETURNED) == {"copy.1"}
    assert device_ops.result_copies(RETURNED.replace("ROOT %copy.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)} copy(%agm.1)",
                                                     "%copy.1 = bf16[1024,16384]{1,0:T(8,128)(2,1)} copy(%agm.1)\n"
                                                     "  ROOT %t = (bf16[1024,16384]) tuple(%copy.1)")) == {"copy.1"}
    assert device_ops.result_copies(CONSUMED) == set()  # a copy the program's own work reads: not the boundary's
    assert device_ops.result_copies(IN_HBM) == set()  # a kernel's result in HBM: any copy of it is a pass of its own
    assert device_ops.result_copies(None) == set()
    assert device_ops.instruction_name("%copy.1 = bf16[8]{0} copy(bf16[8]{0:S(1)} %agm.1)") == "copy.1"
    assert device_ops.instruction_name("copy.1") == "copy.1"


def _timing(samples, sample_ops):
    return timer.Timing(tuple(samples), 10, 0.0, 1e-6, "interval", timer.DEVICE_PROFILER, sample_ops=tuple(sample_ops))


def test_the_boundarys_copy_is_taken_off_each_sample_and_said():
    from pytest_tpucourse.gates import multi_chip

    ops = [{"agm.1": ("custom-call", k), "%copy.1 = bf16[1024,16384] copy(%agm.1)": ("data formatting", c)}
           for k, c in ((101e-6, 51e-6), (102e-6, 52e-6), (100e-6, 50e-6))]
    timing = _timing([152e-6, 154e-6, 150e-6], ops)
    less, note = multi_chip.without_result_copies(timing, RETURNED)
    assert less.samples == pytest.approx((101e-6, 102e-6, 100e-6))
    assert "copy.1, 51.0 us a call" in note and "reads it in VMEM" in note
    same, note = multi_chip.without_result_copies(timing, CONSUMED)  # no boundary copy: the time as measured
    assert same is timing and note == ""
    gone, note = multi_chip.without_result_copies(_timing([152e-6, 154e-6], ops[:1] + [{}]), RETURNED)
    assert gone.samples == (152e-6, 154e-6) and "did not give it in every sample" in note
    unsplit, note = multi_chip.without_result_copies(_timing([152e-6, 154e-6, 150e-6], ()), RETURNED)
    assert unsplit.samples == timing.samples and "includes XLA's copy" in note
