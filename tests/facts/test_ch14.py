"""Chapter 14 (distributed Pallas): what Pallas, its interpreters and libtpu do with remote DMAs,
semaphores and barriers, read off the installed toolchain on the simulated CPU devices. docs/facts.md
lists each claim beside its test; the DMA-mode table is a run's, not a rule's (bench/)."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from pytest_tpucourse.core import jax_internals
from pytest_tpucourse.readers import mosaic, traced_program

from .toolchain import compiler, course_file, for_this_jax, interpreted, refusal, tpu_interpret

S = jax.ShapeDtypeStruct


def ring_permute(x, mesh, params, *, handshake, left=None, right=None, **copy_options):
    """Each device's shard to its right neighbour by one remote DMA, with or without its own barrier.
    left, right: the neighbours as functions of (me, n), in place of lax.rem(me + n - 1, n) and
    lax.rem(me + 1, n)."""
    n = mesh.devices.size
    left = left or (lambda me, n: lax.rem(me + n - 1, n))
    right = right or (lambda me, n: lax.rem(me + 1, n))

    def kernel(x_ref, o_ref, send, recv):
        me = lax.axis_index("x")
        if handshake:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(left(me, n),))
            pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right(me, n),), **copy_options)
        copy.start()
        copy.wait()

    def per_device(shard):
        anywhere = pl.BlockSpec(memory_space=pl.ANY)
        return pl.pallas_call(kernel, out_shape=S(shard.shape, shard.dtype), in_specs=[anywhere], out_specs=anywhere,
                              scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
                              compiler_params=params)(shard)

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)


def test_mesh_coordinates_are_the_default_device_ids_and_jax_0_12_deprecates_naming_them(mesh):
    from jax._src.pallas.primitives import DeviceIdType  # pl.DeviceIdType warns in jax 0.12

    default = inspect.signature(pltpu.make_async_remote_copy).parameters["device_id_type"].default
    assert default == for_this_jax({"0.10.2": DeviceIdType.MESH, "0.11.2": DeviceIdType.MESH, "0.12.0.1": None})  # None: MESH
    ring = mesh(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.make_jaxpr(lambda x: ring_permute(x, ring, pltpu.CompilerParams(), handshake=False,
                                              device_id_type=DeviceIdType.MESH))(jnp.zeros((32, 128)))
    deprecated = [w for w in caught if "device_id_type is deprecated" in str(w.message)]
    assert bool(deprecated) == for_this_jax({"0.10.2": False, "0.11.2": False, "0.12.0.1": True})


def test_lax_rem_of_a_negative_number_is_negative():
    assert int(lax.rem(jnp.int32(-1), jnp.int32(8))) == -1


def test_tpu_interpret_mode_reads_a_negative_device_id_as_a_python_index(mesh):
    """lax.rem(me - 1, n) is -1 on device 0: TPU interpret mode signals device n - 1 for it, so the
    permute's values come out right; a copy into device -1 looks up a buffer keyed by -1 and fails."""
    ring = mesh(4)
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    params = pltpu.CompilerParams(collective_id=0)
    def permute(**neighbour):
        return jax.jit(lambda x: ring_permute(x, ring, params, handshake=True, **neighbour))(x)

    with interpreted(tpu_interpret()):
        signalled = permute(left=lambda me, n: lax.rem(me - 1, n))
        np.testing.assert_array_equal(np.asarray(signalled), np.roll(np.asarray(x), 8, axis=0))
    try:
        with interpreted(tpu_interpret(dma_execution_mode="eager")), pytest.raises(Exception, match=r"\('hbm', \d+, -1, 0\)"):
            # to the left, the barrier signalled to the right (the device that writes into me)
            jax.block_until_ready(permute(right=lambda me, n: lax.rem(me - 1, n), left=lambda me, n: lax.rem(me + 1, n)))
    finally:  # the other devices' threads fail after device 0's: their errors must not reach the next kernel
        jax_internals.forget_abandoned_calls()


def resident_matmul(x, w, mesh, params):
    """x @ w with w split by columns over the ring and each chip's w_j whole in VMEM (no grid)."""
    def kernel(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    def per_device(x, w):
        return pl.pallas_call(kernel, out_shape=S((x.shape[0], w.shape[1]), jnp.float32), compiler_params=params)(x, w)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(None, "x")), out_specs=P(None, "x"),
                         check_vma=False)(x, w)


def test_held_to_16_mib_the_v5e_compiler_refuses_a_kernel_whose_w_j_alone_is_20_mib(mesh):
    """The interpreter does not model VMEM; the compiler counts it, and raising vmem_limit_bytes lets
    the same kernel compile (the collective matmul's compile check, at its size: 4 chips, f32 w_j
    (128, 40960))."""
    ring = mesh(4)
    x = S((32, 128), jnp.float32, sharding=NamedSharding(ring, P()))
    w = S((128, 4 * 40960), jnp.float32, sharding=NamedSharding(ring, P(None, "x")))
    compile_for = compiler()
    refused = refusal(lambda x, w: resident_matmul(x, w, ring, pltpu.CompilerParams()), x, w)
    assert refused is not None and refused.code == "E1001" and "over the compiler's limit of 16.00 MiB" in str(refused), refused
    assert float(re.search(r"needs ([\d.]+) MiB", str(refused)).group(1)) > 20.0
    compile_for(lambda x, w: resident_matmul(x, w, ring, pltpu.CompilerParams(vmem_limit_bytes=64 * 2 ** 20)), x, w)


def kernel_primitives(eqn) -> list[str]:
    names = []

    def walk(jaxpr):
        for inner in jaxpr.eqns:
            names.append(inner.primitive.name)
            for value in inner.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    if hasattr(sub, "eqns"):
                        walk(sub)
                    elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                        walk(sub.jaxpr)

    walk(eqn.params["jaxpr"])
    return names


def test_a_remote_copys_wait_is_a_wait_for_the_send_and_one_for_the_receive(mesh):
    ring = mesh(4)
    closed = jax.make_jaxpr(lambda x: ring_permute(x, ring, pltpu.CompilerParams(), handshake=False))(jnp.zeros((32, 128)))
    (eqn,) = traced_program.pallas_call_eqns(closed)
    assert kernel_primitives(eqn).count("dma_wait") == 2 and kernel_primitives(eqn).count("dma_start") == 1


def test_the_default_barrier_is_a_compiler_param_and_tpu_interpret_mode_reads_only_collective_id():
    from jax._src.pallas.mosaic import core as mosaic_core
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as interpreter

    assert pltpu.CompilerParams().skip_device_barrier is False and pltpu.CompilerParams().collective_id is None
    assert "skip_device_barrier: Skip the default device barrier for the kernel." in inspect.getdoc(mosaic_core.CompilerParams)
    source = inspect.getsource(interpreter)
    assert "The kernel doesn't specify its own barrier semaphore, so we do a global" in source
    assert "skip_device_barrier" not in source  # the flag changes nothing under TPU interpret mode


@pytest.mark.parametrize("params, handshake, refusal", [
    (dict(collective_id=0), False, "collective_id has to be unspecified or None when not using a custom barrier"),
    ({}, True, "collective_id has to be specified when using a custom barrier"),
    (dict(collective_id=0), True, None),
    ({}, False, None),  # Pallas' default barrier
])
def test_the_lowering_pairs_a_collective_id_with_a_barrier_semaphore(mesh, params, handshake, refusal):
    ring = mesh(4)
    call = lambda x: ring_permute(x, ring, pltpu.CompilerParams(**params), handshake=handshake)  # noqa: E731
    if refusal is None:
        mosaic.lower_for_tpu(call, S((32, 128), jnp.float32))
    else:
        with pytest.raises(ValueError, match=refusal):
            mosaic.lower_for_tpu(call, S((32, 128), jnp.float32))


def test_a_semaphore_wait_takes_what_it_waits_for():
    """Signals add, a wait blocks for its value and subtracts it: 3 signalled, waits of 2 and 1, none left."""
    def kernel(o_ref, sem):
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = jnp.ones_like(o_ref)

    call = pl.pallas_call(kernel, out_shape=S((8, 128), jnp.float32), out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])
    printed = io.StringIO()
    with interpreted(tpu_interpret(dma_execution_mode="eager")), contextlib.redirect_stdout(printed):
        assert (np.asarray(call()) == 1).all()
    assert "non-zero count" not in printed.getvalue()


def test_which_interpreter_runs_a_remote_dma(mesh):
    ring = mesh(4)
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    expected = np.roll(np.asarray(x), 8, axis=0)  # shard i on device i + 1
    with interpreted(tpu_interpret()):
        np.testing.assert_array_equal(np.asarray(ring_permute(x, ring, pltpu.CompilerParams(), handshake=False)), expected)
    runs = for_this_jax({"0.10.2": False, "0.11.2": False, "0.12.0.1": True})
    with interpreted(True):
        if runs:
            np.testing.assert_array_equal(np.asarray(ring_permute(x, ring, pltpu.CompilerParams(), handshake=False)), expected)
        else:
            with pytest.raises(TypeError):
                ring_permute(x, ring, pltpu.CompilerParams(), handshake=False)


def test_the_compiler_builds_the_shipped_deadlocking_exchange_for_a_four_chip_v5e(mesh):
    """A deadlock is a property of the run: the compiler takes the shipped pair exchange as it is."""
    pair_exchange = course_file("exercises/ch14/timeline.py").pair_exchange  # as shipped: wait, then signal
    ring = mesh(4)
    x = jax.device_put(jnp.zeros((64, 128), jnp.float32), NamedSharding(ring, P("x")))
    exchange = compiler()(lambda x: pair_exchange(x, mesh=ring), x)
    assert exchange.devices == 4 and exchange.optimized_hlo.count('custom_call_target="tpu_custom_call"') == 1


def test_an_unused_copy_descriptor_is_logged():
    from jax._src.pallas.mosaic import primitives

    assert "AsyncCopyDescriptor was not used." in inspect.getsource(primitives.AsyncCopyDescriptor.__del__)


def test_emit_pipeline_waits_for_its_last_write_back_before_it_returns():
    from jax._src.pallas.mosaic import pipeline

    finalizers = [getattr(pipeline.Scheduler, name) for name in dir(pipeline.Scheduler) if name.startswith("finalize")]
    assert finalizers and all("wait_out" in inspect.getsource(f) for f in finalizers)


def test_the_compute_alones_measured_time_is_gate_04s_latest_row():
    """Chapter 14's "Measured on a v5e": the compute alone's latest row (bench/records.jsonl), its multiple
    of the roofline floor, and that floor (the derivation's 87.2 µs)."""
    from . import measured
    from .reading import readme_prose

    row = measured.gate_rows(4, "all-gather-matmul", "compute-alone")[-1]
    page = readme_prose("ch14")
    us, ratio = row["value"] * 1e6, row["ratio_to_floor"]
    figures = [f"**{us:.1f} µs, {ratio:.2f}× its {us / ratio:.1f} µs floor**", f"commit {row['git_commit'][:7]}"]
    assert [f for f in figures if f not in page] == [], figures
    assert (ratio > 1.5) == ("would fail gate 04" in page)  # the page says whether the criterion's half holds


def _communicating_matmul(x, w, ring):
    """A matmul that takes part in a barrier with its ring: a kernel with a collective_id."""
    def kernel(x_ref, w_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(lax.rem(lax.axis_index("x") + 1, 4),))
            pl.semaphore_wait(barrier, 1)

        o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

    def per_device(x, w):
        return pl.pallas_call(kernel, out_shape=S((x.shape[0], w.shape[1]), x.dtype), grid=(w.shape[1] // 256,),
                              in_specs=[pl.BlockSpec(x.shape, lambda j: (0, 0)),
                                        pl.BlockSpec((w.shape[0], 256), lambda j: (0, j))],
                              out_specs=pl.BlockSpec((x.shape[0], 256), lambda j: (0, j)),
                              compiler_params=pltpu.CompilerParams(collective_id=0,
                                                                   dimension_semantics=("arbitrary",)))(x, w)

    return jax.shard_map(per_device, mesh=ring, in_specs=(P(), P(None, "x")), out_specs=P(None, "x"),
                         check_vma=False)(x, w)


def test_xla_places_a_communicating_kernels_result_in_vmem_and_copies_it_out_only_when_returned(mesh):
    """Gate 04's compute alone timed 152.5 us on a v5e: its kernel 101.3 us and a copy of the kernel's
    result from S(1) (VMEM) to HBM 51.2 us (bench/records.jsonl, the row's per-op breakdown). The
    compiler for a v5e places the result of a kernel with a collective_id in VMEM; a program returning
    it copies it out, one that consumes it reads it in place (gates/device_ops.result_copies)."""
    from pytest_tpucourse.gates import device_ops

    ring = mesh(4)
    x = S((256, 512), jnp.bfloat16, sharding=NamedSharding(ring, P()))
    w = S((512, 4 * 1024), jnp.bfloat16, sharding=NamedSharding(ring, P(None, "x")))
    compile_for = compiler()
    returned = compile_for(lambda x, w: _communicating_matmul(x, w, ring), x, w).optimized_hlo
    consumed = compile_for(lambda x, w: _communicating_matmul(x, w, ring).astype(jnp.float32).sum(0), x, w).optimized_hlo
    assert "S(1)} custom-call(" in returned and len(device_ops.result_copies(returned)) == 1, returned[-3000:]
    assert "S(1)} custom-call(" in consumed and device_ops.result_copies(consumed) == set(), consumed[-3000:]
    assert not re.search(r"\bcopy\(", consumed.split("\nENTRY")[-1]), consumed[-3000:]
