"""The real TPU compiler on a CPU (libtpu, the tpu-compile extra): start-up, verdicts, dumps, command.

Tests that need libtpu skip with the extra's one-line install hint; the start-up is
also run with libtpu hidden, as a learner without the extra has it.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

from pytest_tpucourse import chips
from pytest_tpucourse.commands import main
from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse.grading.compiled import KERNEL_PROGRAM_CACHE
from pytest_tpucourse.run.session import TPU_COMPILES

from .support import compiler_retiles_int8, kernel_test_file

needs_libtpu = pytest.mark.skipif(not libtpu.available(), reason=libtpu.INSTALL_LINE)

COMPILE_TEST = """
    import jax.numpy as jnp
    from pytest_tpucourse import tpu

    def test_double(impl):
        assert float(impl.double.double(jnp.ones(4))[0]) == 2.0

    def test_double_compiles(impl):
        tpu.assert_compiles_for(impl.double.double, jnp.ones((8, 128)))
"""
STARTUP_NOISE = ("TPU_WORKER_HOSTNAMES", "TPU accelerator type", "InitGoogle")


def _hide_libtpu(pytester, monkeypatch):
    """A `libtpu` package that fails to import, first on the path: JAX then finds no TPU library."""
    hidden = pytester.mkdir("hidden")
    (hidden / "libtpu").mkdir()
    (hidden / "libtpu" / "__init__.py").write_text('raise ImportError("hidden for this test")\n')
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)  # set by `import libtpu` in this process
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")])))


@needs_libtpu
def test_with_libtpu_the_run_stays_on_the_cpu_in_interpret_mode_and_quiet(fake_course):
    fake_course.test_file(COMPILE_TEST)
    result = fake_course.run("--solutions", "-v")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*kernels run under TPU interpret mode*", "*backend cpu (cpu,*",
                                 "*test_double_compiles PASSED*"])
    everything = result.stdout.str() + result.stderr.str()
    assert not any(noise in everything for noise in STARTUP_NOISE), result.stderr.str()


def test_without_libtpu_the_compile_check_skips_with_one_line(fake_course, pytester, monkeypatch):
    _hide_libtpu(pytester, monkeypatch)
    fake_course.test_file(COMPILE_TEST)
    result = fake_course.run("--solutions", "-rs")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*kernels run under TPU interpret mode*", "*backend cpu (cpu,*",
                                 "SKIPPED * needs the real TPU compiler: pip install -e *tpu-compile*",
                                 "*1 passed, 1 skipped*"])


def _hide_flatbuffers(pytester, monkeypatch):
    """A `flatbuffers` package that fails to import, first on the path: a TPU VM set up with `jax[tpu]`
    alone, which has libtpu and lacks it."""
    hidden = pytester.mkdir("hidden_flatbuffers")
    (hidden / "flatbuffers").mkdir()
    (hidden / "flatbuffers" / "__init__.py").write_text('raise ImportError("hidden for this test")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")])))


@needs_libtpu
def test_without_flatbuffers_the_compile_check_skips_with_one_line_naming_it(fake_course, pytester, monkeypatch):
    _hide_flatbuffers(pytester, monkeypatch)
    fake_course.test_file(COMPILE_TEST)
    result = fake_course.run("--solutions", "-rs")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*done  double * 1/2 tests passed; 1 compiler check not run (needs flatbuffers*",
                                 "SKIPPED * needs flatbuffers to hand programs to the TPU compiler: "
                                 "pip install flatbuffers (or pip install -e *tpu-compile*)",
                                 "*1 passed, 1 skipped*"])
    assert "ImportError" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("ships, has_libtpu, has_flatbuffers, line", [
    (True, True, True, None),
    (True, True, False, libtpu.FLATBUFFERS_LINE),  # a TPU VM set up with jax[tpu] alone
    (True, False, True, libtpu.INSTALL_LINE),
    (True, False, False, libtpu.INSTALL_LINE),
    (False, False, False, libtpu.NOT_SHIPPED_LINE),
])
def test_what_the_compiler_checks_need_and_the_line_naming_what_is_missing(ships, has_libtpu, has_flatbuffers, line):
    assert libtpu.unavailable_reason(ships=ships, has_libtpu=has_libtpu, has_flatbuffers=has_flatbuffers) == line


def test_on_a_tpu_vm_without_flatbuffers_nothing_is_compiled_and_the_error_names_it(monkeypatch):
    """A TPU VM set up with jax[tpu] alone: libtpu, a TPU backend, no flatbuffers. The host's own chip
    is not compiled for in the test process either (the module's docstring says why)."""
    monkeypatch.setitem(sys.modules, "flatbuffers", None)
    monkeypatch.setattr(libtpu, "_available", None)
    monkeypatch.setattr(libtpu, "installed", lambda: True)
    monkeypatch.setattr(libtpu, "ships_here", lambda: True)
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    monkeypatch.setattr(libtpu, "_child_compiler", lambda *a: pytest.fail("a compiling child was started"))
    assert not libtpu.available() and libtpu.missing_line() == libtpu.FLATBUFFERS_LINE
    with pytest.raises(libtpu.TpuCompilerMissing, match="pip install flatbuffers"):
        libtpu.compile_for(copy, jax.ShapeDtypeStruct((64, 256), jnp.float32), chip=chips.get_chip("v5e"),
                           block=(8, 128))
    assert not libtpu.compile_ahead(copy, jax.ShapeDtypeStruct((64, 256), jnp.float32), block=(8, 128)).started


def _tpu_vm_lines() -> list[str]:
    """The install lines of README.md's "On a TPU VM" set-up."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## On a TPU VM", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("pip install")]


def test_the_tpu_vm_set_up_installs_the_libtpu_jax_tpu_pins_and_what_the_compiler_checks_need():
    """Read off the installed JAX: the libtpu its `tpu` extra pins is the README line's, and the course's
    tpu-compile extra pins the same for this Python (else the line names flatbuffers, not the extra)."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    jax_pin = next(str(r.specifier) for r in map(Requirement, metadata.requires("jax"))
                   if r.name == "libtpu" and r.marker is not None and r.marker.evaluate({"extra": "tpu"}))
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    extras = {text: Requirement(text) for text in pyproject["project"]["optional-dependencies"]["tpu-compile"]}
    extra_pin = next(str(r.specifier) for r in extras.values() if r.name == "libtpu" and r.marker.evaluate())
    [line] = [line for line in _tpu_vm_lines() if f'"jax[tpu]=={jax.__version__}"' in line]
    assert f"(libtpu {jax_pin.removeprefix('==')})" in line, (jax_pin, line)
    if extra_pin == jax_pin:
        assert line.startswith('pip install -e ".[tpu-compile]"'), line
    else:
        flatbuffers = next(text for text, r in extras.items() if r.name == "flatbuffers")
        assert "tpu-compile" not in line and f'"{flatbuffers}"' in line, line


def test_the_compiling_child_never_opens_a_tpu_and_may_start_beside_the_process_holding_one(tmp_path):
    """What a TPU VM's test process hands its compiling child: JAX there may be asked for the TPU."""
    parent = {"JAX_PLATFORMS": "tpu", "LIBTPU_INIT_ARGS": "--xla_tpu_flag=1", "JAX_COMPILATION_CACHE_DIR": "/c",
              "PATH": "/bin"}
    env = libtpu.child_environment(parent, tmp_path)
    assert env["JAX_PLATFORMS"] == "cpu" and env["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1", env
    assert "JAX_COMPILATION_CACHE_DIR" not in env and env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert env["LIBTPU_INIT_ARGS"].startswith("--xla_tpu_flag=1 --xla_mosaic_dump_to=" + str(tmp_path / "mosaic"))
    assert env["PATH"] == "/bin" and parent["JAX_PLATFORMS"] == "tpu", "the parent's own is left alone"


# What a laptop that is not Linux x86_64 (a Mac) has: no libtpu wheel. The run's conftest makes
# the availability probe see such a machine; libtpu is hidden too, as it would not be installed.
NO_LIBTPU_WHEEL = """
    from pytest_tpucourse.compiler import libtpu

    libtpu.ships_here = lambda: False
"""


def test_the_compiling_child_starts_without_pytest():
    """The child process that compiles for a TPU imports this module (`--serve`) each time a compile
    is not kept, after every kernel edit: what it imports is what the edit waits for."""
    code = "import sys, pytest_tpucourse.compiler.libtpu; print(sorted({'pytest', 'hypothesis'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("system, machine, ships", [
    ("Linux", "x86_64", True), ("Darwin", "arm64", False), ("Linux", "aarch64", False),
    ("Windows", "AMD64", False),
])
def test_libtpu_ships_for_linux_x86_64_only(monkeypatch, system, machine, ships):
    import platform

    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert libtpu.ships_here() is ships
    assert libtpu.missing_line() == (libtpu.INSTALL_LINE if ships else libtpu.NOT_SHIPPED_LINE)


def test_without_a_libtpu_wheel_compiler_checks_say_so_and_progress_notes_them(
        fake_course, pytester, monkeypatch, capsys):
    _hide_libtpu(pytester, monkeypatch)
    pytester.makeconftest(NO_LIBTPU_WHEEL)
    fake_course.test_file(COMPILE_TEST)
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    result = fake_course.run("-rs")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*done  double * 1/2 tests passed; 1 compiler check not checked here (libtpu runs on Linux x86_64 only)",
        "SKIPPED * not checked here (libtpu runs on Linux x86_64 only)"])
    monkeypatch.chdir(pytester.path)
    assert main.main(["progress"]) == 0
    out = capsys.readouterr().out
    assert "1/1 exercises" in out, out
    assert "      done  double: 1 compiler check not checked here (libtpu runs on Linux x86_64 only)" in out


def double(x, *, block):
    """A kernel doubling x in `block`-shaped blocks: the cheapest compile that still pipelines."""
    return pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block[0], x.shape[1] // block[1]),
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
    )(x)


def copy(x, *, block):
    return pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block[0], x.shape[1] // block[1]),
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
    )(x)


def matmul_one_block(x, y):
    """One grid step, the whole (M, K) @ (K, N) in VMEM: the MXU count is the block's."""
    return pl.pallas_call(
        lambda x_ref, y_ref, o_ref: o_ref.__setitem__(..., jnp.dot(
            x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
    )(x, y)


@needs_libtpu
def test_blocks_over_the_scoped_vmem_limit_name_both_sizes():
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    with pytest.raises(libtpu.TpuCompileError) as caught:
        libtpu.compile_for(double, x, chip=chips.get_chip("v5e"), block=(2048, 1024))
    error = caught.value
    # 8 MiB blocks, input and output, two buffers each: 32 MiB, against v5e's 16 MiB default.
    assert (error.kind, error.code, error.kernel) == ("vmem", "E1001", "_lambda_")
    assert (error.vmem_needed_bytes, error.vmem_limit_bytes) == (32 * 2 ** 20, 16 * 2 ** 20)
    assert "32.00 MiB" in str(error) and "16.00 MiB" in str(error) and "vmem_limit_bytes" in str(error)
    assert error.vmem_limit_bytes == chips.SCOPED_VMEM_LIMITS["v5e"]
    compiled = libtpu.compile_for(double, x, chip=chips.get_chip("v6e"), block=(2048, 1024))  # 32 MiB limit there
    assert "tpu_custom_call" in compiled.optimized_hlo and compiled.chip == "v6e"


@needs_libtpu
def test_a_block_the_dtype_tiling_does_not_divide_names_operand_block_and_tile():
    x = jax.ShapeDtypeStruct((64, 256), jnp.int8)
    if compiler_retiles_int8():
        assert libtpu.compile_for(copy, x, block=(8, 128)).chip == "v5e"
        return
    with pytest.raises(libtpu.TpuCompileError) as caught:
        libtpu.compile_for(copy, x, block=(8, 128))  # legal for the lowering; int8 tiles are (32, 128)
    error = caught.value
    assert (error.kind, error.code, error.operand) == ("tiling", "E2002", "input 0")
    assert (error.block_shape[-2:], error.tiling, error.array_shape[-2:]) == ((8, 128), (32, 128), (64, 256))
    assert "(32, 128)" in str(error) and "input 0" in str(error)
    libtpu.compile_for(copy, x, block=(32, 128))


@needs_libtpu
def test_a_lowering_error_comes_back_as_the_lowering_kind():
    with pytest.raises(libtpu.TpuCompileError) as caught:
        libtpu.compile_for(copy, jax.ShapeDtypeStruct((64, 256), jnp.float32), block=(4, 128))
    assert caught.value.kind == "lowering" and "divisible by 8 and 128" in str(caught.value)


@needs_libtpu
@pytest.mark.parametrize("chip, vmatmuls", [("v5e", 64), ("v6e", 16)])
def test_dumps_give_bundles_mxu_instructions_and_vreg_counts(chip, vmatmuls):
    """(256, 256) @ (256, 256) bf16: 4 MXUs of 128² take 16 pushes of a 16-row vreg per 128² weight
    tile, 4 tiles (64); 2 MXUs of 256² hold the weights whole (16)."""
    x = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    compiled = libtpu.compile_for(matmul_one_block, x, x, chip=chips.get_chip(chip), dumps=True)
    kernel = compiled.kernel()
    assert kernel.mxu_ops == vmatmuls
    assert 0 < kernel.bundles and kernel.step_bundles <= kernel.bundles
    assert kernel.scoped_vmem_bytes == 3 * 256 * 256 * 2  # x, y, out, one buffer each (a single step)
    # the layouts Mosaic chose: `#tpu.vpad<...>` in libtpu 0.0.42's dump, `#mosaic_tc.vpad<...>` in 0.0.50's
    assert re.search(r"#(tpu|mosaic_tc)\.vpad<", kernel.mosaic_layouts) and (compiled.dump_dir / "llo").is_dir()
    native = [v for v in kernel.values if v.layout.offsets == (0, 0) and v.layout.implicit_dim is None]
    assert native
    for value in native:  # a vreg is 8 x 128 x 32 bits: as many (rows, lanes) tiles as fit, side by side
        rows, lanes = value.layout.tiling
        tiles_per_vreg = 8 * 128 * (32 // value.layout.bitwidth) // (rows * lanes)
        expected = -(-value.shape[-2] // rows) * -(-value.shape[-1] // (lanes * tiles_per_vreg))
        assert value.vregs == expected, value


@needs_libtpu
def test_the_compile_command_prints_static_output_labelled_as_such(tmp_path, capsys):
    module = tmp_path / "kernels.py"
    module.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl

        def matmul(x, y):
            return pl.pallas_call(
                lambda x_ref, y_ref, o_ref: o_ref.__setitem__(..., jnp.dot(
                    x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)),
                out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype))(x, y)

        def stub(x, y):
            raise NotImplementedError("write stub()")
    """))
    assert main.main(["compile", f"{module}:matmul", "--chip", "v5e", "--shape", "256x256,256x256",
                     "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    for expected in ("nothing ran and nothing was timed", "kernel", "VMEM:", "bundles:",
                     "64 vmatmul per grid step", "vregs"):
        assert expected in out, out
    assert main.main(["compile", f"{module}:matmul", "--shape", "256x256,256x256", "--dtype", "int8"]) == 1
    assert "the compiler refuses it" in capsys.readouterr().out  # int8 operands, f32 accumulator
    assert main.main(["compile", f"{module}:stub", "--shape", "256x256,256x256"]) == 1
    assert "stub raised while it was traced: NotImplementedError: write stub()" in capsys.readouterr().out


RING_COPY = """
    import functools
    import jax
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def _kernel(x_ref, o_ref, send, recv, *, axis_name):
        me, n = lax.axis_index(axis_name), lax.axis_size(axis_name)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(lax.rem(me + 1, n),))
        copy.start()
        copy.wait()

    def ring_copy(x, *, mesh, axis_name="x"):
        def per_device(shard):
            return pl.pallas_call(
                functools.partial(_kernel, axis_name=axis_name), out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(shard)
        return jax.shard_map(per_device, mesh=mesh, in_specs=jax.P(axis_name), out_specs=jax.P(axis_name),
                             check_vma=False)(x)
"""


@needs_libtpu
def test_the_compile_command_compiles_a_kernel_that_takes_a_mesh(tmp_path, capsys):
    """--mesh N: the function gets a 1-D mesh of N devices, its arguments split as --split says, and
    the program is compiled over N chips of the topology (the exported shardings kept)."""
    module = tmp_path / "ring.py"
    module.write_text(textwrap.dedent(RING_COPY))
    target = f"{module}:ring_copy"
    assert main.main(["compile", target, "--shape", "64x256", "--dtype", "bfloat16"]) == 1
    out = capsys.readouterr().out
    assert "missing 1 required keyword-only argument: 'mesh'" in out and "with --mesh N" in out, out
    assert main.main(["compile", target, "--mesh", "4", "--split", "0", "--shape", "64x256", "--dtype",
                      "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "ring_copy(bfloat16[64x256], mesh=<4 devices, axis 'x'>) for v5e" in out, out
    assert "kernel _kernel" in out and "over 4 v5e chips" in out, out
    assert "bundles: 0 in the kernel" not in out, out  # the kernel's code read from the dumps of a sharded program
    assert main.main(["compile", target, "--mesh", "8", "--shape", "64x256"]) == 2
    assert "--mesh 8: the v5e compile topology (v5e:2x2) has 4 chips" in capsys.readouterr().err
    assert main.main(["compile", target, "--mesh", "4", "--split", "0,1", "--shape", "64x256"]) == 2
    assert "--split names 2 arguments, --shape 1" in capsys.readouterr().err


@needs_libtpu
def test_the_compile_command_explains_register_spills(tmp_path, capsys):
    """Four (512, 512) f32 values live at once do not fit in the vector registers: the VMEM report's
    SPILL allocation is said in words, not as `SPILL (?)`."""
    module = tmp_path / "spilling.py"
    module.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl

        def body(x_ref, o_ref):
            a = x_ref[...]
            b, c = jnp.exp(a), jnp.sin(a)
            o_ref[...] = (a * b + c) / (b + 1) + a.T @ b

        def kernel(x):
            return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """))
    assert main.main(["compile", f"{module}:kernel", "--chip", "v5e", "--shape", "512x512"]) == 0
    out = capsys.readouterr().out
    assert "register spills: " in out and "stored to VMEM and loaded back" in out, out
    assert "SPILL" not in out and "(?)" not in out, out


@needs_libtpu
def test_a_compile_past_its_deadline_is_stopped_and_the_next_one_runs():
    x = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)
    with pytest.raises(libtpu.TpuCompileError) as caught:
        libtpu.compile_for(matmul_one_block, x, x, timeout=0.01)
    assert caught.value.kind == "timeout" and "did not finish within 0.01 s" in str(caught.value)
    libtpu.compile_for(copy, jax.ShapeDtypeStruct((64, 256), jnp.float32), block=(8, 128))


def test_the_compile_command_without_libtpu_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setattr(libtpu, "_available", False)
    assert main.main(["compile", "x.py:f", "--shape", "8x128"]) == 2
    assert libtpu.INSTALL_LINE in capsys.readouterr().err


def test_the_startup_filter_drops_only_libtpu_lines(monkeypatch, capfd):
    monkeypatch.setattr(libtpu, "_installed", True)
    with libtpu.quiet_libtpu_startup():
        os.write(2, b"E0000 00:00:1 common_lib.cc:554] INVALID_ARGUMENT: from env var TPU_WORKER_HOSTNAMES\n"
                    b"WARNING: Logging before InitGoogle() is written to STDERR\n"
                    b"a line somebody else wrote\n")
    err = capfd.readouterr().err
    assert "a line somebody else wrote" in err and "TPU_WORKER_HOSTNAMES" not in err


@needs_libtpu
def test_a_program_sharded_over_a_mesh_compiles_over_as_many_devices_of_the_topology(mesh):
    """A psum over 4 simulated CPU devices, compiled for 4 devices of a v5e slice: the all-reduce
    the TPU compiler made of it is in the optimized HLO, which is named after the function."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    four = mesh(4)

    def column_sums(x):
        return jax.shard_map(lambda part: jax.lax.psum(part.sum(axis=0), "x"), mesh=four,
                             in_specs=P("x"), out_specs=P())(x)

    x = jax.ShapeDtypeStruct((512, 256), jnp.float32, sharding=NamedSharding(four, P("x")))
    compiled = libtpu.compile_for(column_sums, x, chip=chips.get_chip("v5e"))
    assert compiled.devices == 4 and compiled.device_kind == "TPU v5 lite"
    assert compiled.optimized_hlo.startswith("HloModule jit_column_sums")
    assert " all-reduce(" in compiled.optimized_hlo or " all-reduce-start(" in compiled.optimized_hlo
    assert f"libtpu {libtpu.libtpu_version()}" in compiled.compiler
    assert "4 TPU v5 lite devices of topology v5e:2x2" in compiled.compiler and "nothing ran" in compiled.compiler


@pytest.fixture
def kept_results(tmp_path):
    """Compile results kept in tmp_path for the test, as a run keeps them in --jax-cache."""
    previous = libtpu.keep_results_in(tmp_path)
    yield tmp_path
    libtpu.keep_results_in(previous)  # this run's own folder again


def _compile_matmul(chip: str = "v5e", dumps: bool = True):
    """One call site: the exported program carries its caller's locations, so the same
    test line compiles the same program."""
    x = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    return libtpu.compile_for(matmul_one_block, x, x, chip=chips.get_chip(chip), dumps=dumps)


def _compile_over_vmem():
    """A refusal every measured libtpu gives, at the compiler's stage: 32 MiB of blocks on a v5e."""
    return libtpu.compile_for(double, jax.ShapeDtypeStruct((4096, 1024), jnp.float32), chip=chips.get_chip("v5e"),
                              block=(2048, 1024))


@needs_libtpu
def test_a_compile_kept_from_an_earlier_run_is_read_back_without_the_compiler(kept_results, monkeypatch):
    first = _compile_matmul()
    assert not first.from_cache and len(list(kept_results.iterdir())) == 1

    def no_compiler():
        raise AssertionError("the compiler was asked again")

    monkeypatch.setattr(libtpu, "_child_compiler", no_compiler)
    again = _compile_matmul()
    assert again.from_cache and again.optimized_hlo == first.optimized_hlo
    kept, fresh = again.kernel(), first.kernel()
    assert (kept.bundles_text, kept.mosaic_layouts, kept.mosaic_unrolled, kept.scoped_vmem_bytes) == (
        fresh.bundles_text, fresh.mosaic_layouts, fresh.mosaic_unrolled, fresh.scoped_vmem_bytes)
    assert _compile_matmul(dumps=False).from_cache
    with pytest.raises(AssertionError, match="asked again"):  # another chip is another compile
        _compile_matmul(chip="v6e")


_LEARNER_KERNEL = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def scaled(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3
    if BLOCK is None:
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    spec = pl.BlockSpec(BLOCK, lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // BLOCK[0],),
                          in_specs=[spec], out_specs=spec)(x)
"""


def _learner_file(tmp_path, lines_above: int, block: tuple | None = None):
    """`scaled` from a learner's file with `lines_above` comment lines added above it; whole-array
    blocks, or `block`."""
    path = tmp_path / f"scaled_{lines_above}{'' if block is None else '_blocked'}.py"
    path.write_text("# a note\n" * lines_above + f"BLOCK = {block!r}\n" + _LEARNER_KERNEL)
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["scaled"]


@needs_libtpu
def test_lines_added_above_a_kernel_compile_nothing_again(kept_results, tmp_path, monkeypatch):
    """The kernel's Mosaic body carries the source locations of its lines: a learner's comment
    added above them moves every one, and the program compiled is still the same."""
    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    first = libtpu.compile_for(_learner_file(tmp_path, 0), x, chip=chips.get_chip("v5e"), dumps=False)
    monkeypatch.setattr(libtpu, "_child_compiler", lambda: pytest.fail("compiled again"))
    moved = libtpu.compile_for(_learner_file(tmp_path, 3), x, chip=chips.get_chip("v5e"), dumps=False)
    assert moved.from_cache and not first.from_cache


@needs_libtpu
def test_a_refusal_is_kept_but_a_timeout_is_not(kept_results, monkeypatch):
    with pytest.raises(libtpu.TpuCompileError):
        _compile_over_vmem()  # the compiler's verdict: kept
    assert len(list(kept_results.iterdir())) == 1
    big = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)
    with pytest.raises(libtpu.TpuCompileError, match="did not finish"):
        libtpu.compile_for(matmul_one_block, big, big, timeout=0.01)
    assert len(list(kept_results.iterdir())) == 1  # nothing of the stopped compile
    monkeypatch.setattr(libtpu, "_child_compiler", lambda: pytest.fail("compiled again"))
    with pytest.raises(libtpu.TpuCompileError) as caught:
        _compile_over_vmem()
    assert caught.value.code == "E1001"


def test_a_registered_chip_is_compiled_for_with_its_own_topology():
    """The chip table is one: a Chip registered through the hook carries its compile topology."""
    import dataclasses

    mine = dataclasses.replace(chips.get_chip("v5e"), name="my-v5e", compile_topology="v5e:2x2")
    assert libtpu._topology_name(mine) == "v5e:2x2" and chips.jax_version_of(mine) == "v5e"
    assert libtpu._topology_name(chips.get_chip("v7x")) == chips.get_chip("v7x").compile_topology == "tpu7x:2x2x1"
    with pytest.raises(ValueError, match="no compile_topology"):
        libtpu._topology_name(dataclasses.replace(mine, compile_topology=None))


# The run's chip decides every kernel check: the compile check follows --chip as the lowering does.
COMPILE_AT_THE_RUNS_CHIP = """
    import jax
    import jax.numpy as jnp
    from pytest_tpucourse import tpu

    def test_double_compiles(impl):
        tpu.assert_compiles_for(impl.double.double, jax.ShapeDtypeStruct((4096, 1024), jnp.float32))
"""
# Blocks of 2048 x 1024 f32, input and output, two buffers each: 32 MiB, over v5e's 16 MiB scoped
# limit and within v6e's 32 MiB.
DOUBLE_IN_BIG_BLOCKS = """
    import jax
    from jax.experimental import pallas as pl

    def double(x):
        spec = pl.BlockSpec((2048, 1024), lambda i: (i, 0))
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                              in_specs=[spec], out_specs=spec)(x)
"""


@needs_libtpu
def test_the_compile_check_compiles_for_the_runs_chip(fake_course):
    fake_course.test_file(COMPILE_AT_THE_RUNS_CHIP)
    fake_course.write("solutions", "double", DOUBLE_IN_BIG_BLOCKS)
    result = fake_course.run("--solutions", "--chip", "v6e")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result = fake_course.run("--solutions")  # the course's default chip, whose limit is 16 MiB
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*would not compile for a v5e TPU*32.00 MiB*16.00 MiB*"])


@needs_libtpu
def test_a_registered_chip_compiles_under_its_own_name():
    """A chip registered through the hook, made from v5e's figures, is the chip the result and its
    errors name (its lowering rules are v5e's, which JAX knows)."""
    import dataclasses

    mine = dataclasses.replace(chips.get_chip("v5e"), name="my-v5e")
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    assert libtpu.compile_for(double, x, chip=mine, block=(8, 1024)).chip == "my-v5e"
    with pytest.raises(libtpu.TpuCompileError, match="of VMEM on my-v5e") as caught:
        libtpu.compile_for(double, x, chip=mine, block=(2048, 1024))
    assert caught.value.chip_name == "my-v5e"


REGISTERS_A_CHIP = """
    import dataclasses

    from pytest_tpucourse import chips


    def pytest_tpucourse_register_chips():
        return [dataclasses.replace(chips.get_chip("v5e"), name="my-v5e", device_kinds=("TPU my v5e",))]
"""


@needs_libtpu
def test_the_compile_command_sees_a_chip_a_conftest_registers(pytester, monkeypatch, capsys):
    pytester.makeconftest(REGISTERS_A_CHIP)
    pytester.makepyfile(kernel="""
        import jax
        from jax.experimental import pallas as pl

        def double(x):
            return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                                  out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    """)
    monkeypatch.chdir(pytester.path)
    assert main.main(["compile", "kernel.py:double", "--chip", "my-v5e", "--shape", "8x128"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "kernel.py:double(float32[8x128]) for my-v5e (topology v5e:2x2)" in out, out
    assert main.main(["compile", "kernel.py:double", "--chip", "their-v5e", "--shape", "8x128"]) == 2
    assert "unknown chip 'their-v5e'; known chips: v2, " in capsys.readouterr().err


@needs_libtpu
def test_a_compiler_started_ahead_is_the_one_the_next_compile_asks(kept_results, monkeypatch):
    """A run whose kernels changed starts the compiling child early (its topology made before any
    request); the compile that follows asks that child, and a child never asked is stopped at once."""
    monkeypatch.setattr(libtpu, "_compiler", None)
    libtpu.start_compiler_ahead()
    ahead = libtpu._compiler
    assert ahead is not None and ahead.alive and not ahead.asked
    libtpu.start_compiler_ahead()  # already running: not started twice
    assert libtpu._compiler is ahead
    assert _compile_matmul(dumps=False).optimized_hlo and libtpu._compiler is ahead and ahead.asked
    ahead.close()

    libtpu.start_compiler_ahead()
    unasked = libtpu._compiler
    assert unasked is not ahead and unasked.alive
    unasked.close()  # killed, not waited for: it may still be importing JAX
    assert not unasked.alive and unasked.process.returncode < 0


@needs_libtpu
def test_a_run_whose_kernel_changed_starts_the_compiler_ahead_where_earlier_runs_compiled(fake_course):
    """The compiling child starts at the run's first kernel compiled anew, and only in a tree whose
    earlier runs compiled for a TPU (their results kept): a re-run that loads every kernel, or a
    tree that never compiled for a TPU, starts none."""
    fake_course.test_file(kernel_test_file("""
        from pytest_tpucourse.compiler import libtpu
        print("compiler started ahead:", libtpu._compiler is not None)
    """))
    said = lambda result: [line.split("compiler started ahead: ")[1] for line in result.outlines  # noqa: E731
                           if "compiler started ahead: " in line]
    assert said(fake_course.run("-s")) == ["False"]  # nothing compiled for a TPU yet
    jax_cache = fake_course.pytester.path / ".tpucourse" / "jax-cache"
    (jax_cache / TPU_COMPILES / "an-earlier-compile").mkdir(parents=True)
    assert said(fake_course.run("-s")) == ["False"]  # the kernel is kept: loaded
    for entry in (jax_cache / KERNEL_PROGRAM_CACHE).iterdir():
        entry.unlink()
    assert said(fake_course.run("-s")) == ["True"]


def _asking_counted(monkeypatch) -> list:
    """The programs the compiling child is asked to compile from now on (any thread)."""
    asked, compile = [], libtpu._ChildCompiler.compile

    def counted(self, program, *args, **kwargs):
        asked.append(program)
        return compile(self, program, *args, **kwargs)

    monkeypatch.setattr(libtpu._ChildCompiler, "compile", counted)
    return asked


@needs_libtpu
@pytest.mark.parametrize("kept", [True, False], ids=["results-kept", "nothing-kept"])
def test_a_compile_started_ahead_is_the_one_the_compile_check_reads(kept, tmp_path, monkeypatch):
    """The lowering check starts the program's compile in the background (compile_ahead); the
    compile of the same program later in the run waits for that one and asks the compiler nothing,
    with or without kept results. Another program, or the same one for another chip, is compiled as
    before, and a second start of the same program starts nothing."""
    previous = libtpu.keep_results_in(tmp_path if kept else None)
    try:
        asked = _asking_counted(monkeypatch)
        x = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
        v5e = chips.get_chip("v5e")
        assert libtpu.compile_ahead(matmul_one_block, x, x, chip=v5e).started
        assert not libtpu.compile_ahead(matmul_one_block, x, x, chip=v5e).started  # started already
        compiled = libtpu.compile_for(matmul_one_block, x, x, chip=v5e, dumps=kept)
        assert len(asked) == 1 and compiled.optimized_hlo.startswith("HloModule") and not compiled.from_cache
        if kept:  # the dumps, read back from what the background compile kept
            assert compiled.kernel().bundles > 0
        libtpu.compile_for(matmul_one_block, x, x, chip=chips.get_chip("v6e"))
        assert len(asked) == 2
        if kept:  # kept: a later start finds the result and compiles nothing
            assert not libtpu.compile_ahead(matmul_one_block, x, x, chip=v5e).started
    finally:
        libtpu.keep_results_in(previous)
        libtpu.forget_compiles_ahead()


@needs_libtpu
def test_a_refusal_or_a_stopped_compile_started_ahead_is_compiled_again_by_the_check(kept_results, tmp_path,
                                                                                     monkeypatch):
    """A refusal started ahead is the check's verdict where the kernel's source locations are the
    same (a refusal quotes them); moved by lines added above the kernel, it is compiled again. A
    background compile that outlived its timeout is compiled again with the check's timeout; one
    still running when the check's own timeout ends is the check's timeout."""
    asked = _asking_counted(monkeypatch)
    over, v5e = jax.ShapeDtypeStruct((4096, 1024), jnp.float32), chips.get_chip("v5e")
    assert libtpu.compile_ahead(double, over, chip=v5e, block=(2048, 1024)).started
    with pytest.raises(libtpu.TpuCompileError) as caught:
        _compile_over_vmem()
    assert caught.value.code == "E1001" and len(asked) == 1

    learners = {lines: _learner_file(tmp_path, lines) for lines in (0, 3)}  # the same kernel, moved
    small = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    assert libtpu.compile_ahead(learners[0], small, chip=v5e).started
    assert libtpu.compile_for(learners[3], small, chip=v5e).optimized_hlo and len(asked) == 2  # compiled: reused
    refusing = {lines: _learner_file(tmp_path, lines, block=(2048, 1024)) for lines in (0, 3)}
    assert libtpu.compile_ahead(refusing[0], over, chip=v5e).started
    with pytest.raises(libtpu.TpuCompileError, match="E1001"):
        libtpu.compile_for(refusing[3], over, chip=v5e)
    assert len(asked) == 4  # the refusal from other locations: compiled again

    square = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)  # a compile of about a second
    # stopped by its timeout: not kept
    assert libtpu.compile_ahead(matmul_one_block, square, square, chip=v5e, timeout=0.01).started
    assert not libtpu.compile_for(matmul_one_block, square, square, chip=v5e).from_cache
    assert len(asked) == 6  # compiled again, with the check's own timeout

    square = square.update(dtype=jnp.bfloat16)
    assert libtpu.compile_ahead(matmul_one_block, square, square, chip=v5e).started
    with pytest.raises(libtpu.TpuCompileError, match=r"did not finish within 0.01 s \(it goes on in the background\)"):
        libtpu.compile_for(matmul_one_block, square, square, chip=v5e, timeout=0.01)
    assert libtpu.compile_for(matmul_one_block, square, square, chip=v5e).optimized_hlo  # waited for again
    assert len(asked) == 7


@needs_libtpu
def test_a_process_that_ends_during_a_compile_started_ahead_stops_it_instead_of_waiting(monkeypatch):
    """A run stopped early (-x, a file stopped at its first failure) ends while the child compiles a
    program nobody asks for any more: the child is stopped at once, where an idle one is let go."""
    import time

    monkeypatch.setattr(libtpu, "_compiler", None)
    square = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)  # a compile of about a second
    assert libtpu.compile_ahead(matmul_one_block, square, square, chip=chips.get_chip("v5e")).started
    deadline = time.monotonic() + 30
    while (libtpu._compiler is None or not libtpu._compiler.lock.locked()) and time.monotonic() < deadline:
        time.sleep(0.01)
    child = libtpu._compiler
    start = time.perf_counter()
    child.close()
    assert time.perf_counter() - start < 0.5 and child.process.returncode < 0  # killed, not waited for
    libtpu.forget_compiles_ahead()


def test_without_libtpu_nothing_is_compiled_ahead(monkeypatch):
    monkeypatch.setattr(libtpu, "available", lambda: False)
    monkeypatch.setattr(libtpu, "_background_compiles", lambda: pytest.fail("a compile was started"))
    x = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    assert not libtpu.compile_ahead(matmul_one_block, x, x, chip=chips.get_chip("v5e")).started


@needs_libtpu
def test_the_compile_command_reports_the_vmem_limit_the_kernel_asked_for(tmp_path, capsys):
    """A kernel that asks for 24 MiB of scoped VMEM and compiles is reported against its 24 MiB, not
    the chip's 16 MiB default; one that asks for nothing against the default."""
    module = tmp_path / "asking.py"
    module.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu

        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2

        def double(x, limit=None):
            return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                                  in_specs=[pl.BlockSpec((256, 512), lambda i: (i, 0))],
                                  out_specs=pl.BlockSpec((256, 512), lambda i: (i, 0)),
                                  compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x)
    """))
    assert main.main(["compile", f"{module}:double", "--shape", "512x512", "--kw", f"limit={24 * 2 ** 20}"]) == 0
    out = capsys.readouterr().out
    assert "of the 24.00 MiB scoped-VMEM limit it asks for (vmem_limit_bytes; the v5e default is 16.00 MiB)" in out, out
    assert main.main(["compile", f"{module}:double", "--shape", "512x512"]) == 0
    out = capsys.readouterr().out
    assert "of the 16.00 MiB default scoped-VMEM limit" in out and "asks for" not in out, out


@needs_libtpu
def test_a_compile_held_for_the_runs_end_starts_then_and_is_kept_for_the_next_run(tmp_path, monkeypatch):
    """compile_ahead(after_the_run=True) asks the compiler nothing until the run ends
    (release_compiles_held); its result is then kept in the folder of the run that asked, though
    that run has stopped keeping results, and the next run's check answers from it at once."""
    import time

    asked = _asking_counted(monkeypatch)
    x = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16)
    v5e = chips.get_chip("v5e")
    previous = libtpu.keep_results_in(tmp_path)
    try:
        assert not libtpu.answers_now(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e)
        assert libtpu.compile_ahead(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e,
                                    after_the_run=True).started
        time.sleep(0.5)
        assert asked == [] and not libtpu.answers_now(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e)
        libtpu.release_compiles_held()  # the run ends
        libtpu.keep_results_in(None)
        deadline = time.monotonic() + 120
        while not libtpu.answers_now(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(asked) == 1 and list(tmp_path.glob("*/reply.json"))
        libtpu.forget_compiles_ahead()
        libtpu.keep_results_in(tmp_path)  # the next run
        assert libtpu.answers_now(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e)
        assert libtpu.compile_for(matmul_one_block, x, x.update(shape=(512, 256)), chip=v5e).from_cache
        assert len(asked) == 1
    finally:
        libtpu.keep_results_in(previous)
        libtpu.forget_compiles_ahead()


@needs_libtpu
@pytest.mark.parametrize("served", [True, False], ids=["warm-process", "own-process"])
def test_a_compile_answered_later_is_skipped_only_in_a_run_the_warm_process_answers(served, tmp_path,
                                                                                    monkeypatch):
    """assert_compiles_for(answer_later=True) on a program not compiled before: in the learner's loop
    (a run the warm process answers) skipped, the compile held for the run's end; in any other run
    the verdict now, a refusal included."""
    from pytest_tpucourse.checks import graded
    from pytest_tpucourse.checking import tpu_rules
    from pytest_tpucourse.core.outcomes import WrongResult
    previous = libtpu.keep_results_in(tmp_path)
    try:
        over = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
        fn = graded(lambda x: double(x, block=(2048, 1024)), "double() in test")
        monkeypatch.setattr(fn.context, "in_warm_process", served)
        if served:
            with pytest.raises(pytest.skip.Exception, match="runs in the background once this run has answered"):
                tpu_rules.assert_compiles_for(fn, over, chip="v5e", answer_later=True)
            assert libtpu._held
            with pytest.raises(libtpu.TpuCompileError, match="E1001"):  # asked for in the run: compiled now
                libtpu.compile_for(fn.resolve(), over, chip=chips.get_chip("v5e"))
            assert not libtpu._held
        else:
            with pytest.raises(WrongResult, match="E1001"):
                tpu_rules.assert_compiles_for(fn, over, chip="v5e", answer_later=True)
    finally:
        libtpu.keep_results_in(previous)
        libtpu.forget_compiles_ahead()


@needs_libtpu
def test_a_compile_whose_verdict_comes_next_run_leaves_the_exercise_unfinished(fake_course, pytester):
    """In the warm process's run, a compile held for the run's end is a skip that does not finish the
    exercise; the next run reads the kept verdict and finishes it."""
    pytester.makeconftest("from pytest_tpucourse.learner import served_runs\nserved_runs.SERVING = True\n")
    fake_course.test_file(COMPILE_TEST.replace("jnp.ones((8, 128)))", "jnp.ones((8, 128)), answer_later=True)"))
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    first = fake_course.run("-rs")
    first.stdout.fnmatch_lines(["*part  double * 1/2 tests passed*", f"SKIPPED * {libtpu.VERDICT_NEXT_RUN}"])
    # The compile ran when that run ended, in its process; a next run in a process of its own compiles
    # again if it was lost with it, and finds the verdict either way.
    pytester.makeconftest("")
    second = fake_course.run("-rs")
    second.stdout.fnmatch_lines(["*done  double * 2/2 tests passed*"])
