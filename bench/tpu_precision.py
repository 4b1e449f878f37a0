"""What an f32 matmul is worth on a chip, at each precision JAX offers: read on the chip, kept in
bench/tpu/precision.json, quoted by docs/checking.md ("Precision") and chapters 1, 4, 5, 11 and 13.

    python bench/tpu_precision.py                 on a TPU: measure, print, write bench/tpu/precision.json
    python bench/tpu_precision.py --out FILE      elsewhere
    python bench/tpu_precision.py --dry-run       on any machine: the same measurements, small, not kept

Each figure is a relative Frobenius error ||out - ref|| / ||ref|| against a float64 reference
computed on the host's CPU from the same f32 inputs (standard normal, seed 0):
  - XLA's f32 matmul (256 x K x 256, K = 128, 1024, 4096) at precision DEFAULT, HIGH and HIGHEST,
    and at DEFAULT under `jax.default_matmul_precision("highest")`;
  - f32 attention (softmax(q kᵀ/√D) v, the einsums at each precision) at the chapters' shapes;
  - a Pallas kernel's f32 `jnp.dot` at each precision the Pallas lowering and Mosaic accept, and
    under the config, and the same kernel's product split by hand into three bf16 passes (`dot_3pass`,
    chapter 11 shows it);
  - the course's flash attention forward (solutions/ch13) natively, at the default and under the config.
A precision refused (JAX's Pallas lowering refuses HIGH) is recorded with its error message.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
from pathlib import Path

import jax.numpy as jnp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


def dot_3pass(x, y):
    """x @ y for f32 x and y in three bf16 MXU passes, accumulated in f32: HIGH, by hand."""
    x_hi = x.astype(jnp.bfloat16)
    x_lo = (x - x_hi.astype(jnp.float32)).astype(jnp.bfloat16)
    y_hi = y.astype(jnp.bfloat16)
    y_lo = (y - y_hi.astype(jnp.float32)).astype(jnp.bfloat16)
    dot = functools.partial(jnp.dot, preferred_element_type=jnp.float32)
    return dot(x_hi, y_hi) + (dot(x_hi, y_lo) + dot(x_lo, y_hi))


def relative_error(out, reference) -> float:
    import numpy as np

    out, reference = np.asarray(out, np.float64), np.asarray(reference, np.float64)
    return float(np.linalg.norm(out - reference) / np.linalg.norm(reference))


def measure(small: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl

    from pytest_tpucourse import references

    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    figures: dict = {}
    ks = (128, 256) if small else (128, 1024, 4096)
    for k in ks:
        a = rng.standard_normal((256, k)).astype(np.float32)
        b = rng.standard_normal((k, 256)).astype(np.float32)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        for name in PRECISIONS:
            precision = getattr(jax.lax.Precision, name)
            dot = jax.jit(lambda a, b, p=precision: jnp.dot(a, b, precision=p))
            figures[f"xla matmul f32 256x{k}x256, precision={name}"] = relative_error(dot(a, b), exact)
        with jax.default_matmul_precision("highest"):
            figures[f"xla matmul f32 256x{k}x256, default_matmul_precision('highest')"] = relative_error(
                jax.jit(jnp.dot)(a, b), exact)
    shapes = ((1, 2, 128, 64),) if small else ((1, 2, 256, 64), (1, 2, 2048, 128))
    for shape in shapes:
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        with jax.enable_x64(True), jax.default_device(cpu):
            exact = np.asarray(references.attention_oracle(*(jnp.asarray(t, jnp.float64) for t in (q, k, v))))
        label = "x".join(map(str, shape))
        for name in PRECISIONS:
            figures[f"xla attention f32 {label}, precision={name}"] = relative_error(
                jax.jit(functools.partial(_attention, precision=getattr(jax.lax.Precision, name)))(q, k, v), exact)
        figures[f"xla attention f32 {label}, default"] = relative_error(jax.jit(_attention)(q, k, v), exact)
        with jax.default_matmul_precision("highest"):
            figures[f"xla attention f32 {label}, default_matmul_precision('highest')"] = relative_error(
                jax.jit(_attention)(q, k, v), exact)
        if jax.default_backend() == "tpu":
            from solutions.ch13 import forward

            flash = jax.jit(lambda q, k, v: forward.flash_forward(q, k, v, block_q=128, block_kv=128)[0])
            figures[f"solutions/ch13 flash_forward f32 {label}, native, default"] = relative_error(flash(q, k, v), exact)
            with jax.default_matmul_precision("highest"):
                flash = jax.jit(lambda q, k, v: forward.flash_forward(q, k, v, block_q=128, block_kv=128)[0])
                figures[f"solutions/ch13 flash_forward f32 {label}, native, default_matmul_precision('highest')"] = \
                    relative_error(flash(q, k, v), exact)
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 256)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    interpret = jax.default_backend() != "tpu"
    for name in (None, *PRECISIONS):
        precision = None if name is None else getattr(jax.lax.Precision, name)

        def kernel(a_ref, b_ref, o_ref, precision=precision):
            o_ref[...] = jnp.dot(a_ref[...], b_ref[...], precision=precision, preferred_element_type=jnp.float32)

        key = f"pallas jnp.dot f32 256x1024x256, precision={name or 'None'}"
        try:
            out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
                                 interpret=interpret)(a, b)
            figures[key] = relative_error(out, exact)
        except Exception as error:  # noqa: BLE001 - a refused precision is a finding
            figures[key] = f"refused: {type(error).__name__}: {str(error).splitlines()[0][:200]}"

    def split_kernel(a_ref, b_ref, o_ref):
        o_ref[...] = dot_3pass(a_ref[...], b_ref[...])
    out = pl.pallas_call(split_kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
                         interpret=interpret)(a, b)
    figures["pallas dot_3pass f32 256x1024x256"] = relative_error(out, exact)
    with jax.default_matmul_precision("highest"):
        def kernel(a_ref, b_ref, o_ref):
            o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)
        out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
                             interpret=interpret)(a, b)
        figures["pallas jnp.dot f32 256x1024x256, default_matmul_precision('highest')"] = relative_error(out, exact)
    return figures


def _attention(q, k, v, precision=None):
    import jax
    import jax.numpy as jnp

    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, precision=precision) * q.shape[-1] ** -0.5
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v, precision=precision)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "tpu" / "precision.json")
    parser.add_argument("--dry-run", action="store_true", help="small shapes, any backend, nothing kept")
    args = parser.parse_args(argv)
    import jax
    import jaxlib

    if jax.default_backend() != "tpu" and not args.dry_run:
        print("no TPU here: these figures are a TPU's; --dry-run runs the same code small", file=sys.stderr)
        return 2
    figures = measure(small=args.dry_run)
    from importlib import metadata

    try:
        libtpu = metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        libtpu = None
    kept = {"what": "relative Frobenius error against float64 on the host's CPU, same f32 inputs (seed 0)",
            "command": "python bench/tpu_precision.py", "date": datetime.date.today().isoformat(),
            "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "libtpu": libtpu, "figures": figures}
    for key, value in figures.items():
        print(f"{key:80s} {value if isinstance(value, str) else f'{value:.3g}'}")
    if not args.dry_run:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(kept, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
