"""Wall time of compiling the course's kernels with the real TPU compiler (libtpu), ahead of time.

    python bench/compile_speed.py                # v5e, the shipped solutions at the graded shapes
    python bench/compile_speed.py --chip v6e

Prints a Markdown table for docs/speed.md: per kernel, the whole compile_for call
(trace, lowering, export, the child's compile) and the child's compile alone,
without and with dumps. The first call also starts the child compiler (JAX and
libtpu in a new process): its row says so. This measures the grader's tooling on
this machine; nothing is run on a TPU and nothing here is a kernel's speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cases():
    import jax
    import jax.numpy as jnp

    from pytest_tpucourse import public_kernels

    def s(*shape, dtype="bfloat16"):
        return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))

    solution = lambda name: public_kernels.course_solution(REPO, name)  # noqa: E731
    grad = solution("ch13.backward.flash_attention")
    attention_grad = jax.grad(lambda q, k, v: grad(q, k, v, causal=True).astype("float32").sum(), argnums=(0, 1, 2))
    return [
        ("ch11 add, (512, 1024) bf16", solution("ch11.elementwise_add.add"), (s(512, 1024), s(512, 1024)), {}),
        ("ch11 matmul, 512² bf16, blocks 128", solution("ch11.matmul.matmul"), (s(512, 512), s(512, 512)), {}),
        ("ch11 matmul, 1024² bf16, blocks 256", solution("ch11.matmul.matmul"), (s(1024, 1024), s(1024, 1024)),
         dict(bm=256, bk=256, bn=256)),
        ("ch11 matmul, 1024² bf16, blocks 512", solution("ch11.matmul.matmul"), (s(1024, 1024), s(1024, 1024)),
         dict(bm=512, bk=512, bn=512)),
        ("ch11 matmul, 2048² f32, blocks 1024 (E1001 on v5e)", solution("ch11.matmul.matmul"),
         (s(2048, 2048, dtype="float32"), s(2048, 2048, dtype="float32")), dict(bm=1024, bk=1024, bn=1024)),
        ("ch11 fused matmul + bias + gelu, 512² bf16", solution("ch11.fused_matmul.matmul_bias_act"),
         (s(512, 512), s(512, 512), s(512)), dict(activation="gelu")),
        ("ch11 softmax, (256, 512) bf16", solution("ch11.softmax.softmax"), (s(256, 512),), {}),
        ("ch13 forward, (1, 2, 512, 128) bf16 causal", solution("ch13.forward.flash_forward"),
         (s(1, 2, 512, 128),) * 3, dict(causal=True)),
        ("ch13 backward (3 kernels), (1, 2, 512, 128) bf16 causal", attention_grad, (s(1, 2, 512, 128),) * 3, {}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chip", default="v5e")
    args = parser.parse_args()
    from pytest_tpucourse import chips
    from pytest_tpucourse.compiler import libtpu

    if not libtpu.available():
        sys.exit(libtpu.missing_line())
    print(f"libtpu.compile_for(..., chip={args.chip!r}); {libtpu.READ_AGAINST}; "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d', time.gmtime())}")
    print()
    print("| kernel | compile_for, no dumps | of which the compiler | with dumps | of which the compiler | verdict |")
    print("|---|---|---|---|---|---|")
    for index, (name, fn, shapes, kwargs) in enumerate(cases()):
        cells = []
        verdict = "ok"
        for dumps in (False, True):
            start = time.perf_counter()
            try:
                compiled = libtpu.compile_for(fn, *shapes, chip=chips.get_chip(args.chip), dumps=dumps, **kwargs)
                inner = f"{compiled.compile_seconds:.2f} s"
            except libtpu.TpuCompileError as error:
                verdict, inner = f"{error.kind} ({error.code})" if error.code else error.kind, "-"
            cells += [f"{time.perf_counter() - start:.2f} s", inner]
        note = " (starts the child compiler)" if index == 0 else ""
        print(f"| {name}{note} | {' | '.join(cells)} | {verdict} |")


if __name__ == "__main__":
    main()
