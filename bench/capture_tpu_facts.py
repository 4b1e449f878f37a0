"""Capture what XLA:TPU makes of chapters 4 and 5's programs: the facts their graded tests
assert on a TPU and their READMEs quote beside XLA:CPU's.

Run on a TPU VM, from the course root (one process, about a minute, no network):

    python bench/capture_tpu_facts.py                    # writes exercises/ch04/facts/, exercises/ch05/facts/
    python bench/capture_tpu_facts.py --out DIR          # writes DIR/ch04/ and DIR/ch05/ instead
    python bench/capture_tpu_facts.py --described v5e    # no TPU here: libtpu, ahead of time, for a described v5e
    python bench/capture_tpu_facts.py --dry-run          # any machine: XLA:CPU, S up to 512, into a temporary folder

On a TPU every program is compiled by JAX for the chip, `jax.jit(f).lower(*shapes).compile()`
(nothing runs, nothing is allocated: the arguments are ShapeDtypeStructs). `--described CHIP`
compiles the same programs with `pytest_tpucourse.compiler.libtpu.compile_for` for a described
chip instead, on a host without one. The programs: chapter 4's `gelu_bias` in f32 and bf16 and
`naive_attention` at the graded tests' shapes (the shipped solutions); `references.attention_floor`
(the naive attention both chapters' sweeps measure) and layer norm of (S, 64) over S = 256 to 16384,
one head, D = 64, f32, far enough that the S² term of attention's traffic dominates and its scores
leave VMEM; chapter 5's `streaming_attention` over the same S, with block_k = 128 and with one
block of all the keys (block_k = S, a mistake its graded test must catch).

For each program: the kernels of its optimized HLO's ENTRY (every instruction but parameters,
constants, tuples, bitcasts), XLA's bytes accessed (cost_analysis) and temp bytes
(memory_analysis().temp_size_in_bytes). Each chapter's folder gets `<chip>.json` (a header naming
chip, device kind, versions, date and command, then each program's figures) and `<chip>.hlo.txt`
(each program's ENTRY as compiled, metadata, backend configs and frontend attributes left out). tests/facts/ reads them
against the chapters' READMEs and the graded tests' criteria.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[1]
SWEEP = (256, 512, 1024, 2048, 4096, 8192, 16384)
DRY_RUN_SWEEP = (256, 512)
NOT_KERNELS = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")


@dataclass(frozen=True)
class Program:
    """One compile: `key` names it in the facts files; `chapters` are the folders it is written to."""

    key: str
    chapters: tuple[str, ...]
    source: str  # what the function is, for the reader
    function: object
    args: tuple


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def programs(sweep) -> list[Program]:
    from pytest_tpucourse import references
    from pytest_tpucourse.public_kernels import course_solution

    gelu_bias = course_solution(ROOT, "ch04.fusion.gelu_bias")
    naive_attention = course_solution(ROOT, "ch04.fusion.naive_attention")
    streaming = course_solution(ROOT, "ch05.streaming.streaming_attention")

    def streaming_attention(q, k, v):
        return streaming(q, k, v, block_k=128)

    def one_block(q, k, v):
        return streaming(q, k, v, block_k=k.shape[2])

    def layer_norm(q, k, v):
        return references.LAYERNORM.floor(q, k[0, 0, 0], v[0, 0, 0])

    found = []
    for dtype in (jnp.float32, jnp.bfloat16):
        name = jnp.dtype(dtype).name
        found.append(Program(f"gelu_bias {name}", ("ch04",), "solutions/ch04/fusion.py gelu_bias", gelu_bias,
                             (jax.ShapeDtypeStruct((256, 512), dtype), jax.ShapeDtypeStruct((512,), dtype))))
    q = _f32(1, 2, 256, 64)
    found.append(Program("naive_attention", ("ch04",), "solutions/ch04/fusion.py naive_attention",
                         naive_attention, (q, q, q)))
    for s in sweep:
        q = _f32(1, 1, s, 64)
        found += [
            Program(f"attention_floor S={s}", ("ch04", "ch05"), "references.attention_floor",
                    references.attention_floor, (q, q, q)),
            Program(f"layer_norm S={s}", ("ch04",), "references.LAYERNORM.floor of q, with k[0, 0, 0] and "
                    "v[0, 0, 0] as gamma and beta", layer_norm, (q, q, q)),
            Program(f"streaming_attention S={s}", ("ch05",), "solutions/ch05/streaming.py streaming_attention, "
                    "block_k=128", streaming_attention, (q, q, q)),
            Program(f"one_block S={s}", ("ch05",), "solutions/ch05/streaming.py streaming_attention, block_k=S: "
                    "one block of all the keys (a mistake the graded test must catch)", one_block, (q, q, q)),
        ]
    return found


# ------------------------------------------------------------------ compiling


@dataclass(frozen=True)
class Compiled:
    hlo: str
    bytes_accessed: float
    temp_bytes: int
    device_kind: str  # what the device compiled for calls itself: "TPU v5 lite"


def compile_here(function, args) -> Compiled:
    """The default backend's compile (the chip's, on a TPU)."""
    compiled = jax.jit(function).lower(*args).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
    return Compiled(compiled.as_text(), float(analysis["bytes accessed"]),
                    int(compiled.memory_analysis().temp_size_in_bytes), jax.devices()[0].device_kind)


def compile_described(chip):
    """A compile for a described `chip` (libtpu, ahead of time, in its compiling child)."""
    from pytest_tpucourse.compiler import libtpu

    def compile_for(function, args) -> Compiled:
        compiled = libtpu.compile_for(function, *args, chip=chip)
        return Compiled(compiled.optimized_hlo, float(compiled.bytes_accessed), int(compiled.temp_bytes),
                        compiled.device_kind)

    return compile_for


# ------------------------------------------------------------------ reading and writing


def entry(hlo: str) -> str:
    """The ENTRY computation of an HLO module, without metadata, backend configs and frontend attributes."""
    from pytest_tpucourse.readers import hlo_text

    text = hlo[hlo.index("\nENTRY") + 1:]
    text = text[:text.index("\n}\n") + 2] if "\n}\n" in text else text
    left_out = ("metadata", "backend_config", "frontend_attributes")
    return "\n".join(hlo_text.without_attributes(line, left_out).rstrip() for line in text.splitlines())


def kernels(hlo: str) -> list[str]:
    """"%name = shape opcode" of every ENTRY instruction that launches work, as HLO prints them."""
    from pytest_tpucourse.readers import hlo_text

    module = hlo_text.parse(hlo)
    return [f"%{i.name} = {i.shape} {i.opcode}" for i in module.entry.instructions if i.opcode not in NOT_KERNELS]


def header(*, chip: str, device_kind: str, backend: str, how: str, command: str) -> dict:
    import jaxlib

    from pytest_tpucourse.compiler import libtpu

    return {"chip": chip, "device_kind": device_kind, "backend": backend, "compiled": how,
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "libtpu": libtpu.libtpu_version(),
            "python": sys.version.split()[0], "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "command": command}


def write(folder: Path, chip: str, head: dict, records: dict[str, dict], entries: dict[str, str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    facts = folder / f"{chip}.json"
    facts.write_text(json.dumps({"captured": head, "programs": records}, indent=1) + "\n", encoding="utf-8")
    hlo = folder / f"{chip}.hlo.txt"
    said = ", ".join(f"{key} {value}" for key, value in head.items())
    blocks = [f"// The optimized HLO's ENTRY of each program in {chip}.json (metadata, backend configs and "
              f"frontend attributes left out). {said}"]
    blocks += [f"// {key}\n{text}" for key, text in entries.items()]
    hlo.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return [facts, hlo]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="write DIR/ch04/ and DIR/ch05/ (default: exercises/ch04/facts/, exercises/ch05/facts/)")
    parser.add_argument("--described", metavar="CHIP",
                        help="compile for a described chip with libtpu, on a host without a TPU")
    parser.add_argument("--dry-run", action="store_true",
                        help="compile with the default backend whatever it is, S up to 512, into a temporary folder")
    args = parser.parse_args(argv)
    command = ("python bench/capture_tpu_facts.py" + (f" --described {args.described}" if args.described else "")
               + (" --dry-run" if args.dry_run else ""))

    from pytest_tpucourse import chips
    from pytest_tpucourse.compiler import libtpu

    with libtpu.quiet_libtpu_startup():
        device = jax.devices()[0]
    if args.described:
        if not libtpu.available():
            sys.exit(libtpu.missing_line())
        chip = chips.get_chip(args.described)
        compile_one, chip_name = compile_described(chip), chip.name
        how = f"ahead of time for a described {chip.name} (topology {chip.compile_topology}), on a host without a TPU"
    elif args.dry_run or jax.default_backend() == "tpu":
        compile_one, how = compile_here, f"by JAX on this host's {jax.default_backend()} backend"
        chip_name = chips.chip_for_device(jax.default_backend(), device.device_kind) or jax.default_backend()
    else:
        sys.exit(f"no TPU here (JAX's backend is {jax.default_backend()}): run on a TPU VM, or give "
                 f"--described CHIP, or --dry-run")
    out = args.out or (Path(tempfile.mkdtemp(prefix="tpucourse-facts-")) if args.dry_run else None)
    records: dict[str, dict[str, dict]] = {"ch04": {}, "ch05": {}}
    entries: dict[str, dict[str, str]] = {"ch04": {}, "ch05": {}}
    start = time.perf_counter()
    for program in programs(DRY_RUN_SWEEP if args.dry_run else SWEEP):
        compiled = compile_one(program.function, program.args)
        record = {"program": program.source,
                  "args": [f"{jnp.dtype(a.dtype).name}{list(a.shape)}" for a in program.args],
                  "kernels": kernels(compiled.hlo), "bytes_accessed": compiled.bytes_accessed,
                  "temp_bytes": compiled.temp_bytes}
        for chapter in program.chapters:
            records[chapter][program.key] = record
            entries[chapter][program.key] = entry(compiled.hlo)
        print(f"{program.key}: {len(record['kernels'])} kernels, {compiled.bytes_accessed:,.0f} bytes accessed, "
              f"{compiled.temp_bytes:,} temp bytes", flush=True)
    head = header(chip=chip_name, device_kind=compiled.device_kind, backend="tpu" if args.described else jax.default_backend(),
                  how=how, command=command)
    for chapter in records:
        folder = out / chapter if out is not None else ROOT / "exercises" / chapter / "facts"
        for path in write(folder, chip_name, head, records[chapter], entries[chapter]):
            print(f"wrote {path}")
    print(f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
