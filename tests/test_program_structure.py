"""A traced program's structure key (readers/program_structure.py): two imports of one kernel are
one program; any change a kernel's result or schedule depends on is another; what the key cannot
say in full gives no key. A run runs a program compiled from another import only under an equal
key (grading/compiled.py), so a key that missed a difference would grade the wrong kernel."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_tpucourse.readers.program_structure import structure_key

KERNEL = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

OFFSET = np.full((1, 128), {offset}, np.float32)


def _kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(1) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...] * {factor} + y_ref[...]

    @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def scaled(x, y):
    return pl.pallas_call(
        _kernel,
        grid=(x.shape[0] // 8, 2),
        in_specs=[pl.BlockSpec((8, 128), lambda i, k: {x_index}), pl.BlockSpec((8, 128), lambda i, k: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, k: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=({semantics!r}, "arbitrary")),
    )(x, y) + OFFSET  # a constant the program closes over
'''
CORRECT = dict(factor="2.0", offset="0.0", x_index="(i, k)", semantics="parallel")


def _imported(tmp_path, name, **changes):
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL.format(**{**CORRECT, **changes}))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _key(module, rows=16):
    x = jax.ShapeDtypeStruct((rows, 256), jnp.float32)
    y = jax.ShapeDtypeStruct((rows, 128), jnp.float32)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        return structure_key(jax.jit(module.scaled).trace(x, y).jaxpr)


def test_two_imports_of_one_kernel_are_one_program(tmp_path):
    first, second = _key(_imported(tmp_path, "first")), _key(_imported(tmp_path, "second"))
    assert first is not None and first == second


@pytest.mark.parametrize("change", [
    dict(factor="3.0"),  # the kernel body's constant
    dict(offset="1.0"),  # a constant array the program closes over: by value
    dict(x_index="(i, 0)"),  # a BlockSpec's index map, which the printed jaxpr leaves out
    dict(semantics="arbitrary"),  # compiler parameters: the grid's dimension semantics
], ids=lambda change: next(iter(change)))
def test_a_change_the_kernel_depends_on_is_another_program(tmp_path, change):
    assert _key(_imported(tmp_path, "correct")) != _key(_imported(tmp_path, "changed", **change))


def test_other_shapes_or_interpret_parameters_are_another_program(tmp_path):
    module = _imported(tmp_path, "correct")
    assert _key(module) != _key(module, rows=24)
    x = jax.ShapeDtypeStruct((16, 256), jnp.float32)
    y = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0, detect_races=True)):
        racing = structure_key(jax.jit(module.scaled).trace(x, y).jaxpr)
    assert racing is not None and racing != _key(module)


def test_a_value_the_key_cannot_say_in_full_gives_no_key():
    @jax.custom_jvp
    def relu(x):  # its parameters hold functions (the rule that differentiates it)
        return jnp.maximum(x, 0.0)
    relu.defjvp(lambda primals, tangents: (relu(*primals), tangents[0]))

    assert structure_key(jax.make_jaxpr(relu)(np.float32(1.0))) is None
    assert structure_key(jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(np.float32(1.0))) is not None


def test_a_plain_pallas_call_has_a_key():
    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    traced = jax.make_jaxpr(lambda x: pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                     interpret=True)(x))(np.zeros((8, 128), np.float32))
    assert structure_key(traced) is not None
