"""How the facts tests read the installed toolchain: compiled HLO, a v5e's, a kernel's Mosaic.

Every reader here compiles or lowers, and runs nothing: XLA:CPU through `jax.jit(...).lower(...)
.compile()`, XLA:TPU and Mosaic for a described v5e through the course's own
`pytest_tpucourse.compiler.libtpu.compile_for` (which keeps its results in the run's compile
cache, .tpucourse/jax-cache), and Pallas' TPU lowering through `readers.mosaic`.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
from pathlib import Path

import jax

from pytest_tpucourse import chips
from pytest_tpucourse.compiler import libtpu
from pytest_tpucourse.core.jax_internals import READ_AGAINST
from pytest_tpucourse.public_kernels import course_solution
from pytest_tpucourse.readers import hlo_text

CHIP = chips.get_chip("v5e")
COURSE = Path(__file__).resolve().parents[2]
# The JAX releases the chapters' printouts and figures were read on (pyproject.toml's matrix). On
# another JAX the tests hold what the chapters conclude from them, not the exact text or bytes.
MEASURED_JAX = jax.__version__ in READ_AGAINST


def solution(name: str):
    """A function of the course's shipped solutions, "ch04.fusion.naive_attention"."""
    return course_solution(__file__, name)


def cpu_compiled(fn, *args):
    """XLA:CPU's compiled program (cost and memory analyses, optimized HLO)."""
    return jax.jit(fn).lower(*args).compile()


def cpu_hlo(fn, *args) -> hlo_text.HloModule:
    """XLA:CPU's optimized HLO of jax.jit(fn) for these arguments, parsed."""
    return hlo_text.parse(cpu_compiled(fn, *args).as_text())


def v5e_compiled(fn, *args) -> libtpu.CompiledForTpu:
    """XLA:TPU's compile for a described v5e (optimized HLO, bytes accessed, temp bytes); the test
    skips without libtpu."""
    libtpu.skip_unless_available()
    return libtpu.compile_for(fn, *args, chip=CHIP)


def v5e_hlo(fn, *args) -> hlo_text.HloModule:
    """XLA:TPU's optimized HLO for a described v5e, parsed; the test skips without libtpu."""
    return hlo_text.parse(v5e_compiled(fn, *args).optimized_hlo)


def v5e_kernel(fn, *args):
    """The one Pallas kernel of fn as the v5e compiler built it (its bundles); skips without libtpu."""
    libtpu.skip_unless_available()
    return libtpu.compile_for(fn, *args, chip=CHIP, dumps=True).kernel()


def kernels(module: hlo_text.HloModule) -> list[hlo_text.Instruction]:
    """ENTRY's instructions that launch work (all but parameters, constants, tuples, bitcasts)."""
    return [i for i in module.entry.instructions if i.opcode not in hlo_text.NOT_KERNELS]


def opcodes(module: hlo_text.HloModule, computation: str) -> list[str]:
    """The opcodes of one computation, in order, nested fusions' bodies included."""
    found = []
    for instruction in module.computation(computation).instructions:
        found.append(instruction.opcode)
        for called in instruction.called:
            if instruction.opcode == "fusion":
                found += opcodes(module, called)
    return found


def fusion_kind(instruction: hlo_text.Instruction) -> str:
    """kLoop, kInput, kOutput, kCustom (with XLA:CPU's library in brackets: kCustom[__ynn_fusion])."""
    kind = instruction.attribute("kind") or "?"
    library = re.search(r'"kind":"(__\w+)"', instruction.attribute("backend_config") or "")
    return f"{kind}[{library.group(1)}]" if library else kind


def mosaic_text(custom_call: hlo_text.Instruction) -> str:
    """The Mosaic module XLA:TPU wrote into one of its own `tpu_custom_call`s (MLIR text)."""
    config = json.loads(custom_call.attribute("backend_config"))
    return base64.b64decode(config["custom_call_config"]["body"]).decode()


def readme_block(chapter: str, first_line: str) -> str:
    """The fenced code block of exercises/<chapter>/README.md whose first line starts with
    `first_line`, without its fences: what the chapter shows a tool printing."""
    text = (COURSE / "exercises" / chapter / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M):
        if block.startswith(first_line):
            return block
    raise LookupError(f"exercises/{chapter}/README.md shows no block starting {first_line!r}")


def readme_prose(chapter: str) -> str:
    """exercises/<chapter>/README.md with every run of whitespace one space: a claim wrapped over lines reads whole."""
    return " ".join((COURSE / "exercises" / chapter / "README.md").read_text(encoding="utf-8").split())


def versions() -> str:
    """The installed JAX and libtpu, as the failure messages name them."""
    return f"jax {jax.__version__}, libtpu {libtpu.libtpu_version()}"


def kept_tpu_facts(chapter: str, chip: str = "v5e") -> dict:
    """exercises/<chapter>/facts/<chip>.json: what XLA:TPU made of the chapter's programs, as
    bench/capture_tpu_facts.py wrote it ("captured": who, how and when; "programs": the figures)."""
    return json.loads((COURSE / "exercises" / chapter / "facts" / f"{chip}.json").read_text(encoding="utf-8"))


def kept_sweep(facts: dict, program: str, figure: str) -> dict[int, float]:
    """{S: figure} over the kept sweep of `program` ("attention_floor", "bytes_accessed")."""
    found = {int(key.split("S=")[1]): record[figure] for key, record in facts["programs"].items()
             if key.startswith(f"{program} S=")}
    return dict(sorted(found.items()))


def kept_entry(chapter: str, program: str, chip: str = "v5e") -> hlo_text.HloModule:
    """The ENTRY XLA:TPU compiled `program` to, parsed, from exercises/<chapter>/facts/<chip>.hlo.txt."""
    text = (COURSE / "exercises" / chapter / "facts" / f"{chip}.hlo.txt").read_text(encoding="utf-8")
    for block in re.split(r"^// ", text, flags=re.M)[2:]:
        key, entry = block.split("\n", 1)
        if key == program:
            return hlo_text.parse(entry)
    raise LookupError(f"exercises/{chapter}/facts/{chip}.hlo.txt holds no {program!r}")


def kept_args(record: dict) -> list[jax.ShapeDtypeStruct]:
    """The arguments a kept program was compiled for ("float32[1, 1, 256, 64]" each)."""
    import jax.numpy as jnp

    found = []
    for text in record["args"]:
        dtype, dims = text.rstrip("]").split("[")
        found.append(jax.ShapeDtypeStruct(tuple(int(d) for d in dims.split(",") if d.strip()), jnp.dtype(dtype)))
    return found


def kept_kernels(record: dict) -> list[tuple[str, str, str]]:
    """(opcode, shape, line) of a kept program's kernels, as a graded test's _kernels reads an ENTRY."""
    found = []
    for line in record["kernels"]:
        name, rest = line.split(" = ", 1)
        shape, opcode = rest.rsplit(" ", 1)
        found.append((opcode, shape, line))
    return found


def graded_tests(chapter: str, name: str):
    """A chapter's graded test module (exercises/<chapter>/<name>.py), imported by path: its criteria."""
    path = COURSE / "exercises" / chapter / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"graded_{chapter}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
