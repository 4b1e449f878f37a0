"""What keeps grading fast, shown to keep its checks: cheap compiles of kernel and checker
programs only, kernel programs kept across runs, values and races from one call, dev draws over
compiled cases, a mutant's file stopped at its first failure (docs/speed.md has the times)."""

import ast
import functools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jax._src import compiler

from pytest_tpucourse import checks
from pytest_tpucourse.core import jax_internals, kept_files
from pytest_tpucourse.checking import tpu_rules
from pytest_tpucourse.grading import compiled
from pytest_tpucourse.grading.compiled import (
    CompiledPrograms,
    kernel_program_options,
    runs_interpreted_kernel,
)
from pytest_tpucourse.core.outcomes import WrongResult

from .chapter_runs import launch_at_start
from .chapter_worker import StopFileAtFirstFailure
from .support import kernel_test_file


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def blocked_copy(x, *, semantics="parallel", out_block=None):
    """A copy of x in (8, 128) blocks; out_block=(0, 0) makes every step write one block."""
    out_map = (lambda i: out_block) if out_block else (lambda i: (i, 0))
    return pl.pallas_call(
        _copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), out_map),
        compiler_params=pltpu.CompilerParams(dimension_semantics=(semantics,)))(x)


def test_only_programs_that_run_an_interpreted_kernel_get_the_cheap_compile():
    x = jnp.ones((32, 128), jnp.float32)
    kernel = jax.make_jaxpr(blocked_copy)(x)
    plain = jax.make_jaxpr(lambda a: jnp.tanh(a) * 2)(x)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        assert runs_interpreted_kernel(kernel, (x,))
        assert not runs_interpreted_kernel(plain, (x,))
    with pltpu.force_tpu_interpret_mode(None):  # natively on a TPU: the TPU's own compiler
        assert not runs_interpreted_kernel(kernel, (x,))


def test_the_checkers_own_programs_compile_cheaply_on_a_cpu_and_graded_ones_with_xlas_defaults(monkeypatch):
    seen = []
    compile_lowered = jax.stages.Lowered.compile

    def recording(self, compiler_options=None):
        seen.append(compiler_options)
        return compile_lowered(self, compiler_options=compiler_options)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    programs, x = CompiledPrograms(), jnp.ones((8, 128), jnp.float32)

    def oracle(a):
        return jnp.tanh(a) * 2

    programs.get(oracle, {}, checker=True)(x)
    programs.get(oracle, {})(x)  # the same function graded: a program of its own, XLA's defaults
    assert seen == [kernel_program_options(), None]


def test_xla_cpu_compiles_each_lone_op_as_a_fusion_of_its_own_from_jaxlib_0_12_and_refuses_the_older_route():
    """Read off XLA, on each JAX: jaxlib 0.10.2 takes `xla_cpu_use_fusion_emitters=False` (its older
    elemental emitters, for an op no fusion took in), and jaxlib 0.12 refuses the option and wraps
    each such op in a fusion of its own for its MLIR emitters. A kernel program under interpret mode
    is mostly the interpreter's small fusions between host callbacks, each of which costs 0.12 about
    three times what it costs 0.10.2 with the plugin's options: the program's first compile costs
    0.12 two to three times as much (docs/speed.md, bench/compile_options.py --per-fusion)."""
    options = kernel_program_options()

    def rows(block):
        return np.int32(block.shape[0])

    def program(x):  # a broadcast only a host callback reads: nothing fuses into it
        return io_callback(rows, jax.ShapeDtypeStruct((), jnp.int32), jnp.broadcast_to(x, (8, 128)),
                           ordered=True)

    hlo = jax.jit(program).lower(jnp.float32(1)).compile(compiler_options=options).as_text()
    older_route = "xla_cpu_use_fusion_emitters" in options
    lone_op_fusions = hlo.count(" fusion(")
    assert older_route == (lone_op_fusions == 0), (options, hlo)
    if jax.__version__ == "0.10.2":
        assert older_route, options
    elif jax.__version__.startswith("0.12"):
        assert not older_route and lone_op_fusions == 1, hlo


def test_the_interpreters_own_callbacks_skip_jaxs_device_put_and_every_other_callback_keeps_it(monkeypatch):
    """JAX's io_callback puts each argument of a host callback on the CPU device before the
    call (read here off JAX's own path: a kernel's interpreter callbacks, unwrapped, each call
    device_put). A course session hands the TPU interpreter's own functions XLA's NumPy arrays
    instead; a learner's io_callback in the same program still gets jax Arrays, and the values
    are the same either way."""
    from jax._src import api, callback

    assert getattr(callback.io_callback_impl, "tpucourse_host_arrays", False), \
        "a course session hands the interpreter's callbacks host arrays"
    puts, seen, put = [], [], api.device_put

    def counting(*args, **kwargs):  # the device_puts of io_callback's own path
        if sys._getframe(1).f_globals.get("__name__") == callback.__name__:
            puts.append(1)
        return put(*args, **kwargs)

    monkeypatch.setattr(api, "device_put", counting)

    def learners_callback(value):
        seen.append(isinstance(value, jax.Array))
        return value

    def program():  # a new function each time: a new lowering, with new callbacks
        def copy_after_a_callback(a):
            a = io_callback(learners_callback, jax.ShapeDtypeStruct(a.shape, a.dtype), a)
            return blocked_copy(a)
        return jax.jit(copy_after_a_callback)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        np.testing.assert_array_equal(program()(x), x)
        assert (len(puts), seen) == (1, [True])  # the learner's callback alone went through device_put
        monkeypatch.setattr(callback, "io_callback_impl", callback.io_callback_impl.__wrapped__)
        puts.clear()
        np.testing.assert_array_equal(program()(x), x)
    assert len(puts) > 10, "JAX's own io_callback puts every argument of every interpreter callback"


def _runs_of_the_same(contexts: list) -> list[int]:
    runs = [1]
    for before, context in zip(contexts, contexts[1:]):
        if context is before:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def test_jax_makes_an_mlir_context_per_lowering_before_0_12_and_a_course_session_reuses_them_as_0_12_does():
    """Every lowering asks `make_ir_context` for an MLIR context. JAX 0.10.2 builds a new one each
    time (every dialect loaded: read here off JAX's own function); 0.12 hands each thread's context
    out again, 10 times, and then makes another. A course session gives 0.10.2 the same reuse; 0.12's
    own is left as it is. Each thread has its own."""
    from jax._src.interpreters import mlir

    native = hasattr(mlir, "_thread_local_context")
    if jax.__version__ == "0.10.2" or jax.__version__.startswith("0.12"):
        assert native == jax.__version__.startswith("0.12"), f"JAX {jax.__version__}: reuse read differently"
    make = mlir.make_ir_context
    assert getattr(make, "tpucourse_reused", False) != native, "a course session reuses contexts where JAX does not"
    if not native:
        assert make.__wrapped__() is not make.__wrapped__(), "JAX's own function makes one per call"
    contexts = [make() for _ in range(5 * (jax_internals.CONTEXT_REUSES + 1))]
    assert set(_runs_of_the_same(contexts)[1:-1]) == {jax_internals.CONTEXT_REUSES + 1}
    in_another_thread = []
    thread = threading.Thread(target=lambda: in_another_thread.append(make()))
    thread.start()
    thread.join()
    assert all(in_another_thread[0] is not context for context in contexts)
    assert not jax_internals.mlir_contexts_reused(), "called again, or JAX's own reuse: nothing to do"


def _permutation_at_trace_time(x):
    """x plus a permutation of its length drawn while the program is traced: an eager program
    compiled from inside the lowering of another (a constant a kernel computes, in Python)."""
    with jax.ensure_compile_time_eval():
        order = jax.random.permutation(jax.random.key(3), x.shape[0])
    return x + order


def _a_context_just_made(mlir):
    """Ask for contexts until the thread's context changes. The new one has every reuse ahead of
    it, under JAX's reuse (0.12) and the course's (0.10.2), each bounded to CONTEXT_REUSES."""
    first = mlir.make_ir_context()
    for _ in range(jax_internals.CONTEXT_REUSES + 2):
        context = mlir.make_ir_context()
        if context is not first:
            return context
    raise AssertionError(f"the same MLIR context past {jax_internals.CONTEXT_REUSES} reuses")


def test_a_lowering_inside_a_lowering_gets_a_context_of_its_own():
    """Where contexts are reused (a course session on 0.10.2), a lowering started while another is
    building its module on the same thread is handed another context: JAX 0.10.2 cannot compile
    the inner program in the outer one's. The outer context is handed out again afterwards."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    jax_internals.mlir_contexts_reused()
    outer = _a_context_just_made(mlir)  # its reuses ahead of it, whatever ran before on this thread
    with outer:
        if hasattr(mlir, "_thread_local_context"):  # JAX's own reuse: the same context, nested too
            assert mlir.make_ir_context() is outer
        else:
            inner = mlir.make_ir_context()
            assert inner is not outer
            with inner:
                assert mlir.make_ir_context() not in (inner, outer)
    assert ir.Context.current is None
    assert mlir.make_ir_context() is outer
    x = jnp.zeros(16, jnp.int32)
    expected = np.asarray(jax.random.permutation(jax.random.key(3), 16))
    for _ in range(jax_internals.CONTEXT_REUSES + 2):  # past a context's last reuse
        lowered = jax.jit(_permutation_at_trace_time).lower(x)
        np.testing.assert_array_equal(np.asarray(lowered.compile()(x)), expected)


def _stdout_of_a_fresh_process(program: str) -> str:
    """What `python -c program` prints, in a process of its own (JAX's state as a new run has it)."""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


_LOWERS_AN_INTERPRETED_KERNEL = """
import importlib.abc, sys, time
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from pytest_tpucourse.core import jax_internals

jax_internals.leave_out_gpu_interpreter(LEFT_OUT)
asked = []
class Recorder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
sys.meta_path.insert(0, Recorder())

def double(x):
    return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

x = jnp.ones((8, 128), jnp.float32)
start = time.perf_counter()
with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
    jax.jit(double).lower(x)
    seconds = time.perf_counter() - start
    assert float(jax.jit(double)(x)[0, 0]) == 2.0
print(asked.count(jax_internals.GPU_INTERPRETER), jax_internals.GPU_INTERPRETER in sys.modules, seconds)
"""


@pytest.mark.parametrize("left_out", [False, True], ids=["as-jax-has-it", "in-a-course-session"])
def test_jaxs_interpret_lowering_imports_the_gpu_interpreter_and_a_course_session_leaves_it_out(left_out):
    """Read off JAX, in a fresh process: lowering a pallas_call under TPU interpret mode asks for
    the Mosaic GPU interpreter's module (to check for GPU interpret parameters); on 0.10.2 the
    import fails (Mosaic GPU needs absl), on 0.12 it loads Mosaic GPU. A course session refuses the
    import at once, and the kernel lowers and runs all the same."""
    program = _LOWERS_AN_INTERPRETED_KERNEL.replace("LEFT_OUT", str(left_out))
    asked, imported, seconds = _stdout_of_a_fresh_process(program).split()
    assert int(asked) >= 1, "JAX's lowering asks for the GPU interpreter"
    if left_out:
        assert imported == "False", seconds
    elif jax.__version__ == "0.10.2":  # Mosaic GPU needs absl, which 0.10.2's install lacks
        assert imported == "False", seconds
    elif jax.__version__.startswith("0.12"):
        assert imported == "True", seconds


_GRID_ORDER_IN_THE_PROGRAM = """
import json
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from pytest_tpucourse.core import jax_internals

AHEAD = jax_internals.grid_orders_computed_ahead() if COMPUTED_AHEAD else False

def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

def add_one(x):  # grid 4 x 3 x 2: two parallel axes the interpreter visits in a drawn order
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4, 3, 2),
                          in_specs=[pl.BlockSpec((8, 128), lambda i, j, k: (i, j))],
                          out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "parallel", "arbitrary")))(x)

x = jnp.zeros((32, 384), jnp.float32)
orders, whiles = [], []
for seed in (0, 7):
    points = []
    def record(token, coords, core):
        points.append([int(c) for c in coords])
        return token
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=seed, grid_point_recorder=record)):
        program = jax.jit(add_one).lower(x).compile()
        assert float(program(x).sum()) == x.size
    orders.append(points)
    whiles.append(program.as_text().count(" while("))
print(json.dumps(dict(ahead=AHEAD, orders=orders, whiles=whiles)))
"""


def test_the_interpreter_draws_its_grid_order_in_the_program_and_a_course_session_computes_it_ahead():
    """Read off JAX, in fresh processes: TPU interpret mode visits the parallel axes of a grid in an
    order drawn from the random seed, by a permutation traced into the kernel's program (threefry
    rounds and a sort: while loops XLA compiles with every kernel). A course session computes the
    same order once, eagerly, and the program holds it as constants: the same grid points in the
    same order, seed by seed, and a program with fewer loops to compile."""
    runs = {}
    for ahead in (False, True):
        program = _GRID_ORDER_IN_THE_PROGRAM.replace("COMPUTED_AHEAD", str(ahead))
        runs[ahead] = json.loads(_stdout_of_a_fresh_process(program).splitlines()[-1])
    as_jax_has_it, ahead = runs[False], runs[True]
    assert ahead["ahead"] is True, "the interpreter's grid order is where jax_internals reads it"
    assert ahead["orders"] == as_jax_has_it["orders"], "the same grid points, in the same order"
    assert ahead["orders"][0] != ahead["orders"][1], "the seed draws the order (else nothing is read here)"
    assert sorted(map(tuple, ahead["orders"][0])) == [(i, j, k) for i in range(4) for j in range(3)
                                                     for k in range(2)]
    assert all(without > with_ for without, with_ in zip(as_jax_has_it["whiles"], ahead["whiles"])), runs


_GRID_ORDER_UNDER_SHARD_MAP = """
import json
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec as P
from pytest_tpucourse.core import jax_internals

AHEAD = jax_internals.grid_orders_computed_ahead() if COMPUTED_AHEAD else False

def kernel(x_ref, o_ref, count_ref):  # each block of the output: when its grid point was visited
    o_ref[...] = jnp.full(o_ref.shape, count_ref[0], jnp.int32)
    count_ref[0] = count_ref[0] + 1

def per_device(shard):  # the first kernel of the process, traced inside an eager shard_map's manual axes
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shard.shape, jnp.int32), grid=(8,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          scratch_shapes=[pltpu.SMEM((1,), jnp.int32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(shard)

mesh = Mesh(np.array(jax.devices()), ("x",))
x = jnp.zeros((4 * 64, 128), jnp.float32)
with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=11)):
    out = np.asarray(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(x))
visits = []
for device in out[::8, 0].reshape(4, 8).astype(np.int64) % 2**32:  # the count starts at whatever the memory held
    first = [v for v in device if (v - 1) % 2**32 not in set(device)]
    visits.append([int((v - first[0]) % 2**32) for v in device] if len(first) == 1 else None)
print(json.dumps(dict(ahead=AHEAD, visits=visits)))
"""


def test_a_grid_order_is_computed_ahead_for_a_kernel_traced_inside_shard_map():
    """The first kernel of a process traced inside an eager `jax.shard_map` (a learner's call): JAX
    cannot make a random key eagerly under a mesh's manual axes, so the order is computed in a
    thread of its own, and it is JAX's: each device visits its grid points in the same order."""
    runs = {}
    for ahead in (False, True):
        program = _GRID_ORDER_UNDER_SHARD_MAP.replace("COMPUTED_AHEAD", str(ahead))
        runs[ahead] = json.loads(_stdout_of_a_fresh_process(program).splitlines()[-1])
    assert runs[True]["ahead"] is True
    assert runs[True]["visits"] == runs[False]["visits"], "JAX's order, device by device"
    assert all(sorted(device) == list(range(8)) for device in runs[True]["visits"])
    assert runs[True]["visits"][0] != list(range(8)), "the seed draws the order (else nothing is read here)"


def test_grid_orders_computed_ahead_is_idempotent_and_keeps_jaxs_errors():
    """Called twice, the second call does nothing; a parallel extent JAX cannot read at trace time
    still fails as JAX has it fail."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as module

    jax_internals.grid_orders_computed_ahead()
    assert not jax_internals.grid_orders_computed_ahead()
    order = getattr(module, jax_internals._GRID_ORDER)
    assert order.tpucourse_ahead
    params = pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary"))
    first = order((4, 2), params, 3)
    assert [np.asarray(a).tolist() for a in first] == [np.asarray(a).tolist()
                                                       for a in order.__wrapped__((4, 2), params, 3)]
    assert np.asarray(first[1]).shape == (0,)

    def traced_extent(n):
        return order((n, 2), params, 3)

    with pytest.raises(Exception) as error:
        jax.jit(traced_extent)(4)
    with pytest.raises(type(error.value)):
        jax.jit(lambda n: order.__wrapped__((n, 2), params, 3))(4)


def test_a_grid_order_computed_ahead_follows_the_settings_jaxs_random_bits_follow():
    """The order is JAX's for the random-bit settings in effect when the kernel is traced: an
    order computed under one setting of `jax_threefry_partitionable` is not reused under the other."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as module

    jax_internals.grid_orders_computed_ahead()
    order = getattr(module, jax_internals._GRID_ORDER)
    params = pltpu.CompilerParams(dimension_semantics=("parallel",))
    grid = (64,)
    as_set = jax.config.jax_threefry_partitionable
    orders = {}
    try:
        for partitionable in (as_set, not as_set, as_set):
            jax.config.update("jax_threefry_partitionable", partitionable)
            ahead = np.asarray(order(grid, params, 5)[0]).tolist()
            assert ahead == np.asarray(order.__wrapped__(grid, params, 5)[0]).tolist()
            orders.setdefault(partitionable, ahead)
            assert orders[partitionable] == ahead
    finally:
        jax.config.update("jax_threefry_partitionable", as_set)
    assert orders[True] != orders[False], "the setting changes the bits (else nothing is read here)"


@pytest.fixture
def kept_kernel_programs(tmp_path):
    """Programs with host callbacks compiled as a run compiles them, kept in tmp_path."""
    previous = jax_internals.compile_host_callback_programs(
        jax_internals.HostCallbackPrograms(tmp_path, tuple(kernel_program_options().items())))
    yield tmp_path
    jax_internals.compile_host_callback_programs(previous)


def _new_program():
    """jit of a new function (nothing of it in JAX's caches) with the same name and program."""
    def program(a):
        return blocked_copy(a)

    return jax.jit(program)


def _counting_xla_compiles(monkeypatch, pause: float = 0.0) -> list:
    """The XLA compiles of programs with host callbacks from now on (each held `pause` s)."""
    compiles, compile_and_load = [], compiler.backend_compile_and_load

    def counting(backend, module, devices, options, host_callbacks):
        if host_callbacks:
            compiles.append(1)
            time.sleep(pause)
        return compile_and_load(backend, module, devices, options, host_callbacks)

    monkeypatch.setattr(compiler, "backend_compile_and_load", counting)
    return compiles


def test_a_kernel_program_compiled_once_is_loaded_with_the_callbacks_of_a_new_lowering(
        kept_kernel_programs, monkeypatch):
    compiles = _counting_xla_compiles(monkeypatch)
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    y, z = x + 7, x[:16]
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        np.testing.assert_array_equal(_new_program()(x), x)
        assert len(compiles) == 1 and len(list(kept_kernel_programs.iterdir())) == 1
        # a new function, so a new lowering with new callbacks (what the next run has): loaded
        np.testing.assert_array_equal(_new_program()(y), y)
        assert len(compiles) == 1
        (entry,) = kept_kernel_programs.iterdir()
        entry.write_bytes(entry.read_bytes()[:100])  # a damaged entry is compiled again, and replaced
        np.testing.assert_array_equal(_new_program()(x), x)
        assert len(compiles) == 2 and entry.stat().st_size > 100
        np.testing.assert_array_equal(_new_program()(z), z)  # another shape: compiled
        assert len(compiles) == 3 and len(list(kept_kernel_programs.iterdir())) == 2


def test_the_first_kernel_program_compiled_anew_is_announced_once(tmp_path, monkeypatch):
    """What starts the TPU compiler's child ahead in a run whose kernels changed: called once,
    at the first program not kept, never for one loaded from the kept folder."""
    calls = []
    previous = jax_internals.compile_host_callback_programs(jax_internals.HostCallbackPrograms(
        tmp_path, tuple(kernel_program_options().items()), on_first_compile=lambda: calls.append(1)))
    try:
        x = jnp.ones((32, 128), jnp.float32)
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
            _new_program()(x)  # kept from now on: loaded below, nothing compiled
            assert calls == [1]
            jax_internals.compile_host_callback_programs(jax_internals.HostCallbackPrograms(
                tmp_path, tuple(kernel_program_options().items()), on_first_compile=lambda: calls.append(2)))
            _new_program()(x)
            assert calls == [1], "a kept program loaded is not a compile"
            _new_program()(x[:16])
            _new_program()(x[:8])
            assert calls == [1, 2], "announced once per run"
    finally:
        jax_internals.compile_host_callback_programs(previous)


def test_threads_compiling_one_kernel_program_at_once_compile_it_once(kept_kernel_programs, monkeypatch):
    """The interpreter compiles each simulated core's program in a thread of its own, at once."""
    compiles = _counting_xla_compiles(monkeypatch, pause=0.5)
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    executables = {}
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        lowered = [_new_program().trace(x).lower() for _ in range(2)]

        def compile(i):
            executables[i] = lowered[i].compile()

        threads = [threading.Thread(target=compile, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(compiles) == 1 and len(executables) == 2
        for executable in executables.values():  # each with its own lowering's callbacks
            np.testing.assert_array_equal(executable(x), x)


def test_the_race_check_compiles_its_cores_programs_cheaply_and_keeps_them(kept_kernel_programs, monkeypatch):
    compiles = _counting_xla_compiles(monkeypatch)
    racy = checks.graded(functools.partial(blocked_copy, out_block=(0, 0)), "copy() in test")
    x = jnp.ones((32, 128), jnp.float32)
    for _ in range(2):
        with pytest.raises(WrongResult, match="data race"):
            with tpu_rules.checking_races(racy):
                racy(x)
        racy.context.programs._programs.clear()  # the next run's programs: traced and lowered anew
    kept = len(list(kept_kernel_programs.iterdir()))
    assert kept >= 2 and len(compiles) == kept  # the outer program and the cores' own, each once


def test_a_kernel_program_over_several_devices_compiles_but_is_not_kept(kept_kernel_programs):
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    x = jax.device_put(jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128),
                       jax.NamedSharding(mesh, jax.P("x")))
    per_device = jax.shard_map(blocked_copy, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"),
                               check_vma=False)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        np.testing.assert_array_equal(jax.jit(per_device)(x), x)
    assert not list(kept_kernel_programs.iterdir())


def test_a_run_keeps_kernel_programs_in_its_jax_cache(fake_course):
    fake_course.test_file(kernel_test_file())
    assert fake_course.run("-p", "no:randomly").ret == 0
    kept = fake_course.pytester.path / ".tpucourse" / "jax-cache" / compiled.KERNEL_PROGRAM_CACHE
    assert len(list(kept.iterdir())) == 1
    assert fake_course.run("-p", "no:randomly", "--jax-cache", "none").ret == 0


def test_a_program_compiles_once_per_signature_and_interpret_setting():
    programs = CompiledPrograms()
    program = programs.get(blocked_copy, {})
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        np.testing.assert_array_equal(program(x), x)
        np.testing.assert_array_equal(program(x + 1), x + 1)  # same signature: no new compile
        assert len(program._executables) == 1
        program(jnp.ones((16, 128), jnp.float32))  # a new shape compiles
        assert len(program._executables) == 2
    with tpu_rules.checking_races(checks.graded(blocked_copy, "copy() in test")):
        np.testing.assert_array_equal(program(x), x)  # a race-detecting program of its own
    assert len(program._executables) == 3


def test_a_graded_call_runs_its_compiled_program_once_per_signature():
    """Graded calls go through the run's compiled programs (never op by op), traced within the
    deadline and compiled outside it."""
    fn = checks.graded(blocked_copy, "copy() in test")
    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        np.testing.assert_array_equal(fn(x), x)
        np.testing.assert_array_equal(fn(x + 1), x + 1)
    program = fn.context.programs.get(blocked_copy, {})
    assert len(program._executables) == 1


def test_values_and_races_come_from_one_call():
    x = jnp.ones((32, 128), jnp.float32)
    racy = checks.graded(functools.partial(blocked_copy, out_block=(0, 0)), "copy() in test")
    with pytest.raises(WrongResult, match="(?s)data race under TPU interpret mode with 2 TensorCores.*race detector saw"):
        with tpu_rules.checking_races(racy):
            racy(x)  # the values of one block are right; the race is what fails it

    wrong = checks.graded(lambda a: blocked_copy(a) + 1, "copy() in test")
    with pytest.raises(WrongResult, match=r"(?s)output is wrong.*\(under TPU interpret mode with 2 "
                                          r"TensorCores per device \(detect_races=True\)\)"):
        with tpu_rules.checking_races(wrong):
            checks.assert_close(wrong(x), np.ones((32, 128)), fn=wrong, dtype=np.float32)


@pytest.mark.parametrize("profile, one_case", [("dev", True), ("ci", False)])
def test_dev_draws_the_cases_its_explicit_examples_compiled(fake_course, profile, one_case):
    fake_course.test_file("""
        from hypothesis import example, given
        from pytest_tpucourse import strategies as tst

        SEEN = []

        @given(case=tst.few((8, 128), (16, 256), (24, 384)), dtype=tst.dtypes(), seed=tst.seeds())
        @example(case=(16, 256), dtype="float32", seed=0)
        def test_draws(case, dtype, seed):
            SEEN.append((case, dtype))

        def test_what_was_drawn():
            print("DRAWN", sorted(set(SEEN)))
            assert len(SEEN) > 3
    """)
    result = fake_course.run("-s", "-p", "no:randomly", "--hypothesis-profile", profile)
    result.assert_outcomes(passed=2)
    drawn = next(line for line in result.outlines if "DRAWN" in line).split("DRAWN", 1)[1].strip()
    if one_case:  # new seeds on the shape and dtype the example compiled
        assert drawn == "[((16, 256), 'float32')]"
    else:
        assert drawn != "[((16, 256), 'float32')]"


@pytest.mark.parametrize("profile", ["dev", "ci"])
def test_dev_draws_repeat_one_explicit_example_at_a_time(fake_course, profile):
    """Each argument drawn on its own would combine the examples' values into new programs."""
    fake_course.test_file("""
        from hypothesis import example, given
        from pytest_tpucourse import strategies as tst

        SEEN = []

        @given(case=tst.few((8, 128), (16, 256), (24, 384)), causal=tst.booleans(), dtype=tst.dtypes(),
               seed=tst.seeds())
        @example(case=(16, 256), causal=True, dtype="float32", seed=0)
        @example(case=(8, 128), causal=False, dtype="bfloat16", seed=0)
        def test_draws(case, causal, dtype, seed):
            SEEN.append((case, causal, dtype))

        def test_what_was_drawn():
            print("DRAWN", sorted(set(SEEN)))
    """)
    examples = {((16, 256), True, "float32"), ((8, 128), False, "bfloat16")}
    drawn = set()
    for _ in range(4):  # dev draws at random: several runs, 12 drawn examples
        result = fake_course.run("-s", "-p", "no:randomly", "--hypothesis-profile", profile)
        result.assert_outcomes(passed=2)
        line = next(line for line in result.outlines if "DRAWN" in line)
        drawn |= set(ast.literal_eval(line.split("DRAWN", 1)[1].strip()))
    if profile == "dev":
        assert drawn == examples
    else:
        assert drawn - examples


def test_dev_draws_each_argument_from_its_own_value_in_the_examples(fake_course):
    """An option equal to another argument's value (axis 0 and seed 0) is not the example's
    axis: dev draws repeat the axis the example gives, never a combination none holds."""
    fake_course.test_file("""
        from hypothesis import example, given
        from pytest_tpucourse import strategies as tst

        SEEN = []

        @given(axis=tst.few(-1, 0, 1), seed=tst.seeds())
        @example(axis=1, seed=0)
        def test_draws(axis, seed):
            SEEN.append(axis)

        def test_what_was_drawn():
            print("DRAWN", sorted(set(SEEN)))
    """)
    drawn = set()
    for _ in range(3):  # dev draws at random: several runs, 9 drawn examples
        result = fake_course.run("-s", "-p", "no:randomly", "--hypothesis-profile", "dev")
        result.assert_outcomes(passed=2)
        line = next(line for line in result.outlines if "DRAWN" in line)
        drawn |= set(ast.literal_eval(line.split("DRAWN", 1)[1].strip()))
    assert drawn == {1}


def test_a_file_a_mutant_must_fail_stops_at_its_first_failure(pytester):
    body = textwrap.dedent("""
        def test_1(): assert False
        def test_2(): assert False
        def test_3(): pass
    """)
    pytester.makepyfile(test_caught=body, test_passing_elsewhere=body)
    result = pytester.runpytest("-p", "no:randomly",
                                plugins=[StopFileAtFirstFailure(["test_caught.py"])])
    result.assert_outcomes(failed=3, passed=1, skipped=2)  # the other file runs to its end
    result.stdout.fnmatch_lines(["*test_caught.py::test_1 *", "*test_passing_elsewhere.py::test_2 *"])


class _HandedIn:
    """A chapter runner that records what is handed in, in order, and runs nothing."""

    def __init__(self):
        self.jobs: dict[str, str] = {}

    def submitted(self, key):
        return key in self.jobs

    def submit(self, key, job):
        assert key not in self.jobs, f"{key} handed in twice"
        self.jobs[key] = job


def test_every_declared_chapter_run_is_handed_in_at_the_start_in_test_order():
    """The runs go to the worker before the session's first test, whichever module holds them:
    the session's other tests run while the worker grades the chapters."""
    import types

    declaring, other = types.ModuleType("declaring"), types.ModuleType("other")
    declaring.chapter_job = lambda item, runner: None if item.nodeid.endswith("no_run") else f"run of {item.nodeid}"
    items = [types.SimpleNamespace(nodeid=f"{module.__name__}::{name}", module=module)
             for module, name in ((other, "first"), (declaring, "stubs"), (declaring, "no_run"),
                                  (other, "later"), (declaring, "mutant"))]
    runner = _HandedIn()
    launch_at_start(runner, items)
    assert list(runner.jobs.items()) == [("declaring::stubs", "run of declaring::stubs"),
                                         ("declaring::mutant", "run of declaring::mutant")]
    launch_at_start(runner, items)  # a run handed in is never declared (its tree built) again
    assert len(runner.jobs) == 2


def test_the_chapter_worker_preloads_without_starting_jax():
    """Runs are forked from the worker: a child of a process whose XLA client exists waits
    forever on compile threads it does not have."""
    preload = ("import sys; sys.path.insert(0, 'tests'); import chapter_worker as w; w.preload(); "
               "from pytest_tpucourse.core import jax_internals; "
               "print('started' if jax_internals.backends_started() else 'not started')")
    done = subprocess.run([sys.executable, "-c", preload], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "not started", done.stdout + done.stderr


def test_a_kept_folder_past_its_size_loses_the_entries_used_longest_ago(tmp_path):
    for i, name in enumerate(["old", "used", "newer", "newest"]):
        entry = tmp_path / name
        entry.write_bytes(b"x" * 100)
        os.utime(entry, (1000 + i, 1000 + i))
    (tmp_path / "folder").mkdir()  # a compile for a TPU: a folder, counted by its files
    (tmp_path / "folder" / "reply.json").write_bytes(b"x" * 100)
    os.utime(tmp_path / "folder", (999, 999))
    (tmp_path / "key.123.456.partial").write_bytes(b"x" * 1000)  # being written: never counted or removed
    kept_files.touch(tmp_path / "used")
    kept_files.trim(tmp_path, limit=500)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["old", "used", "newer", "newest", "folder", "key.123.456.partial"])  # 500 bytes: within
    kept_files.trim(tmp_path, limit=400)  # removed down to 300 bytes, oldest first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key.123.456.partial", "newer", "newest", "used"]


def test_both_kept_folders_are_trimmed_when_the_run_ends_not_at_each_compile(tmp_path, monkeypatch):
    from pytest_tpucourse.compiler import libtpu

    monkeypatch.setattr(kept_files, "KEPT_BYTES", 250)
    programs, compiles = tmp_path / "kernel-programs", tmp_path / "tpu-compiles"
    for folder in (programs, compiles):
        folder.mkdir()
        for i in range(3):
            (folder / f"entry{i}").write_bytes(b"x" * 100)
            os.utime(folder / f"entry{i}", (1000 + i, 1000 + i))
    this_runs_policy = jax_internals.compile_host_callback_programs(None)
    this_runs_folder = libtpu.keep_results_in(None)
    try:
        compiled.compile_kernel_programs(programs)
        libtpu.keep_results_in(compiles)
        assert len(list(programs.iterdir())) == len(list(compiles.iterdir())) == 3  # untouched while running
        compiled.stop_compiling_kernel_programs()
        libtpu.keep_results_in(None)
    finally:
        jax_internals.compile_host_callback_programs(this_runs_policy)
        libtpu.keep_results_in(this_runs_folder)
    for folder in (programs, compiles):  # 300 bytes past 250: down to 187, the oldest gone first
        assert sorted(p.name for p in folder.iterdir()) == ["entry2"]
